"""Source loaders on small files of each data set's real column layout, local and on a real S3 server (moto)."""

import json
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parathink.data.sources import SourceError, SourceUnavailable, load_problems, load_source

DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{p}\n\n"
               "Remember to put your answer on its own line after \"Answer:\".")

# One or two rows per data set, with the columns (and column types) the hub copies have.
ROWS = {
    "gsm8k": [{"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
               "answer": "In May she sold 48/2 = <<48/2=24>>24.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"},
              {"question": "A shop sells 1,200 pens a day. How many in 2 days?", "answer": "1200*2=2400\n#### 2,400"}],
    "dapo_math_17k": [{"data_source": "math_dapo", "ability": "MATH",
                       "prompt": [{"content": DAPO_PROMPT.format(p="Find $x$ if $2x = 34$."), "role": "user"}],
                       "reward_model": {"ground_truth": "17", "style": "rule-lean"},
                       "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}}],
    "math500": [{"problem": "Compute $\\dbinom{5}{2}$.", "solution": "It is $\\boxed{10}$.", "answer": "10",
                 "subject": "Counting & Probability", "level": 2, "unique_id": "test/counting/1.json"}],
    "aime24": [{"id": 60, "problem": "Find the remainder when 2024 is divided by 1000.", "solution": "24",
                "answer": "24", "url": "https://example.invalid/aime", "year": "2024"}],
    "aime25": [{"problem": "Find the sum of all integer bases $b>9$ ...", "answer": "70", "id": "0"}],
    "amc23": [{"id": 0, "question": "What is $1+1$?", "answer": 2.0, "url": "https://example.invalid/amc"}],
}
EXPECTED = {
    "gsm8k": [("gsm8k-train-0", "72"), ("gsm8k-train-1", "2400")],
    "dapo_math_17k": [("dapo_math_17k-9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079", "17")],
    "math500": [("math500-test/counting/1.json", "10")],
    "aime24": [("aime24-60", "24")],
    "aime25": [("aime25-0", "70")],
    "amc23": [("amc23-0", "2")],
}


def _write(path, rows):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_layout_from_local_files(tmp_path, name, suffix):
    path = tmp_path / f"{name}{suffix}"
    _write(path, ROWS[name])
    split = "train" if name == "gsm8k" else None
    records = load_source(name, path, split=split)
    assert [(r["id"], r["answer"]) for r in records] == EXPECTED[name]
    assert all(r["source"] == name and r["problem"].strip() for r in records)
    if name == "dapo_math_17k":  # the instruction wrapper is stripped, the problem kept
        assert records[0]["problem"] == "Find $x$ if $2x = 34$."
    if name == "math500":
        assert records[0]["level"] == 2


def test_directory_limit_and_problem_specs(tmp_path):
    _write(tmp_path / "a.jsonl", ROWS["gsm8k"])
    assert len(load_source("gsm8k", tmp_path, limit=1)) == 1
    assert [r["answer"] for r in load_problems({"source": "gsm8k", "uri": str(tmp_path)})] == ["72", "2400"]
    syn = load_problems({"source": "synthetic", "level": "easy", "split": "test", "n": 5})
    assert len(syn) == 5 and all(r["level"] == "easy" for r in syn)


@pytest.mark.parametrize("content, why", [(b'{"question": "q", "answer": "#### 1"}\nnot json\n', ":2: not JSON"),
                                          (b'{"question": "q\xff", "answer": "#### 1"}\n', ":1: not UTF-8"),
                                          (b'{"question": "q", "answer": "no marker"}\n', "row 1 does not have"),
                                          (b'[1, 2]\n', ":1: expected a JSON object, got list")])
def test_bad_files_say_where_and_why(tmp_path, content, why):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=why) as e:
        load_source("gsm8k", path)
    assert str(path) in str(e.value)


def test_unknown_source_and_missing_path(tmp_path):
    with pytest.raises(SourceError, match="unknown source 'gsm9k'"):
        load_source("gsm9k", tmp_path)
    with pytest.raises(SourceError, match="no such file"):
        load_source("gsm8k", tmp_path / "nope.jsonl")


def test_hub_unreachable_is_one_clear_error(monkeypatch):
    # Without `datasets` installed the loader says so; with it, an unreachable hub is reported by name.
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(SourceUnavailable, match="`datasets` package is not installed"):
        load_source("gsm8k")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(SourceUnavailable, match=r"hub:openai/gsm8k \(train\) is not reachable"):
        load_source("gsm8k")


def test_s3_object_and_prefix_against_a_real_s3_server(s3_client, tmp_path):
    client = s3_client
    client.create_bucket(Bucket="problems")
    _write(tmp_path / "dapo.parquet", ROWS["dapo_math_17k"])
    client.upload_file(str(tmp_path / "dapo.parquet"), "problems", "dapo/part-0.parquet")
    client.put_object(Bucket="problems", Key="gsm8k/train.jsonl",
                      Body="".join(json.dumps(r) + "\n" for r in ROWS["gsm8k"]).encode())

    assert [r["answer"] for r in load_source("gsm8k", "s3://problems/gsm8k/train.jsonl")] == ["72", "2400"]
    assert [r["answer"] for r in load_source("dapo_math_17k", "s3://problems/dapo/")] == ["17"]
    with pytest.raises(SourceError, match="s3://problems/missing.jsonl"):
        load_source("gsm8k", "s3://problems/missing.jsonl")

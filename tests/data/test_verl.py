"""The verl layout as a source layout: combined files, data_source selection, repeats, wrappers, local and S3."""

import pytest
from verl_files import MATH, REPEATED, REPEATS, WRAPPED, combined_rows, row, write

from parathink.data import verl
from parathink.data.sources import SourceError, load_problems, repeats

# (data_source, problem, answer, repeats) of the combined file, in file order.
EXPECTED = [(ds, p, a, REPEATS) for ds, p, a in REPEATED] + [("APO_MATH300", p, a, 1) for p, a in MATH]


def _summary(records):
    return [(r["data_source"], r["problem"], r["answer"], r.get("repeats", 1)) for r in records]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("wrapper, system", [("none", False), ("parallel_r1", False), ("parallel_r1_ruled", False),
                                             ("baseline", False), ("qwen_boxed", True)])
def test_combined_file_gives_one_record_per_problem(tmp_path, suffix, wrapper, system):
    path = write(tmp_path / f"evals{suffix}", combined_rows(wrapper, system))
    records = load_problems({"source": "verl", "uri": str(path)})
    assert _summary(records) == EXPECTED
    assert all(r["source"] == "verl" for r in records)
    # No extra_info.index in Parallel-R1's combined file: a problem's id is its first row, prefixed by its set.
    assert [r["id"] for r in records] == ["verl-APO_AIME24-0", "verl-APO_AIME24-1", "verl-APO_AIME25-2",
                                          "verl-APO_AMC23-3", "verl-APO_MATH300-16", "verl-APO_MATH300-17",
                                          "verl-APO_MATH300-18"]
    assert repeats(records) == {REPEATS: 4, 1: 3}


@pytest.mark.parametrize("data_source, n, reps", [("APO_AIME24", 2, {4: 2}), (["APO_AMC23", "APO_MATH300"], 4, {4: 1, 1: 3})])
def test_data_source_selects_the_rows_of_a_set(tmp_path, data_source, n, reps):
    path = write(tmp_path / "evals.parquet", combined_rows("parallel_r1"))
    records = load_problems({"source": "verl", "uri": str(path), "data_source": data_source})
    assert len(records) == n and repeats(records) == reps
    # ids name the row in the file, whatever the selection
    if data_source == "APO_AIME24":
        assert [r["id"] for r in records] == ["verl-APO_AIME24-0", "verl-APO_AIME24-1"]


def test_an_unknown_data_source_names_the_ones_the_file_has(tmp_path):
    path = write(tmp_path / "evals.parquet", combined_rows())
    with pytest.raises(SourceError, match=r"no row has data_source APO_AIME42; the file has APO_AIME24 \(8 rows\), "
                                          r"APO_AIME25 \(4 rows\), APO_AMC23 \(4 rows\), APO_MATH300 \(3 rows\)") as e:
        load_problems({"source": "verl", "uri": str(path), "data_source": "APO_AIME42"})
    assert str(path) in str(e.value)


@pytest.mark.parametrize("wrapper", sorted(WRAPPED))
def test_known_wrappers_are_stripped(wrapper):
    problem = "Let $x$ be the answer.\n\nWhat is $x$ if $3x = 12$?"  # blank lines inside the problem survive
    assert verl.strip_wrapper(WRAPPED[wrapper].format(p=problem)) == problem


@pytest.mark.parametrize("text", ["Solve the following equation for $x$: $2x+3=11$.",
                                  "Let's think about $x^2=4$. What is $x>0$?",
                                  "Problem: find $x$."])
def test_problems_that_look_like_a_wrapper_are_kept(text):
    assert verl.strip_wrapper(text) == text


def test_ground_truths_as_strings_ints_floats_and_latex(tmp_path):
    # verl's GSM8K file: an int64 ground_truth column and extra_info.index; the index is the native id.
    gsm = [row("openai/gsm8k", f"Tom has {i} apples and buys 2 more. How many now?", i + 2, "verl_gsm8k",
               extra={"index": i, "split": "test"}) for i in range(3)]
    records = load_problems({"source": "verl", "uri": str(write(tmp_path / "gsm8k.parquet", gsm))})
    assert [(r["id"], r["answer"]) for r in records] == [("verl-openai/gsm8k-0", "2"), ("verl-openai/gsm8k-1", "3"),
                                                          ("verl-openai/gsm8k-2", "4")]
    assert records[0]["problem"] == "Tom has 0 apples and buys 2 more. How many now?"
    mixed = [row("amc", "What is 27?", 27.0), row("amc", "What is 5?", 5), row("math", "Half?", "\\frac{1}{2}")]
    records = load_problems({"source": "verl", "uri": str(write(tmp_path / "mixed.jsonl", mixed))})
    assert [r["answer"] for r in records] == ["27", "5", "\\frac{1}{2}"]


@pytest.mark.parametrize("bad, why", [
    ({"reward_model": {"ground_truth": ["1", "2"]}}, "ground_truth: one answer expected, got list"),
    ({"reward_model": {"style": "rule"}}, "missing or malformed 'ground_truth'"),
    ({"prompt": [{"role": "system", "content": "Be brief."}]}, "prompt has no user message"),
    ({"prompt": 7}, "prompt: chat messages expected, got int"),
    ({"reward_model": {"ground_truth": ""}}, "empty problem or answer"),
])
def test_malformed_rows_say_which_row_and_why(tmp_path, bad, why):
    rows = [row("APO_AIME24", "What is 1+1?", "2"), {**row("APO_AIME24", "What is 2+2?", "4"), **bad}]
    path = write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(SourceError, match=f"row 2 .*{why}"):
        load_problems({"source": "verl", "uri": str(path)})


def test_an_id_repeated_on_another_problem_is_an_error(tmp_path):
    rows = [row("gsm8k", "What is 1+1?", "2", extra={"index": 7}), row("gsm8k", "What is 1+1?", "2", extra={"index": 7}),
            row("gsm8k", "What is 2+2?", "4", extra={"index": 7})]
    with pytest.raises(SourceError, match="row 3 repeats id 'verl-gsm8k-7' of row 1 on another problem"):
        load_problems({"source": "verl", "uri": str(write(tmp_path / "dup.jsonl", rows))})


def test_limit_counts_problems_after_their_repeats(tmp_path):
    path = write(tmp_path / "evals.parquet", combined_rows())
    records = load_problems({"source": "verl", "uri": str(path), "limit": 2})
    assert _summary(records) == EXPECTED[:2]  # all 4 rows of each counted, though interleaved with others
    with pytest.raises(SourceError, match="limit must be an integer >= 1, got 'two'"):
        load_problems({"source": "verl", "uri": str(path), "limit": "two"})


def test_a_named_source_reads_a_verl_file_and_says_which_layout_it_used(tmp_path, capsys):
    path = write(tmp_path / "evals.parquet", combined_rows("parallel_r1"))
    records = load_problems({"source": "aime24", "uri": str(path), "data_source": "APO_AIME24"})
    assert [(r["id"], r["source"], r["answer"]) for r in records] == [("aime24-APO_AIME24-0", "aime24", "1"),
                                                                      ("aime24-APO_AIME24-1", "aime24", "16")]
    assert f"{path}: columns of the verl layout, not of aime24's; read as verl" in capsys.readouterr().err
    # DAPO's own layout is verl-shaped and reads the rows the same way: nothing to say.
    assert len(load_problems({"source": "dapo_math_17k", "uri": str(path)})) == 7 and capsys.readouterr().err == ""
    # A verl file that kept the problem's own columns beside a prompt in a wrapper we do not know: both layouts fit
    # and read different problems; the named one is used, and said.
    both = [{**row("APO_MATH300", p, a), "problem": p, "answer": a} for p, a in MATH]
    for r in both:
        r["prompt"][0]["content"] = "Answer in one line.\n\n" + r["problem"]
    path = write(tmp_path / "both.parquet", both)
    records = load_problems({"source": "math500", "uri": str(path)})
    assert [r["problem"] for r in records] == [p for p, _ in MATH] and "data_source" not in records[0]
    assert "columns fit both the math500 and the verl layout, which read row 1 differently; read as math500" \
        in capsys.readouterr().err
    assert load_problems({"source": "verl", "uri": str(path)})[0]["problem"].startswith("Answer in one line.")
    assert capsys.readouterr().err == ""  # asked for verl by name: nothing to say


def test_data_source_on_a_file_without_that_column_reads_every_row(tmp_path, capsys):
    path = tmp_path / "aime.jsonl"
    path.write_text('{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "What is 2+2?", "answer": "4"}\n')
    records = load_problems({"source": "aime24", "uri": str(path), "data_source": "APO_AIME24"})
    assert [r["answer"] for r in records] == ["2", "4"]
    assert "no data_source column (APO_AIME24 applies to verl files); every row read" in capsys.readouterr().err


def test_combined_file_on_a_real_s3_server(s3_client, tmp_path):
    s3_client.create_bucket(Bucket="evals")
    s3_client.upload_file(str(write(tmp_path / "test.parquet", combined_rows("parallel_r1"))), "evals",
                          "parallel_r1/test.parquet")
    records = load_problems({"source": "verl", "uri": "s3://evals/parallel_r1/test.parquet"})
    assert _summary(records) == EXPECTED
    amc = load_problems({"source": "amc23", "uri": "s3://evals/parallel_r1/", "data_source": "APO_AMC23"})
    assert [(r["answer"], r["repeats"]) for r in amc] == [("\\frac{5}{6}", REPEATS)]

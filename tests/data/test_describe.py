"""`parathink data describe SPEC`: exactly one JSON object on stdout, one-line errors with exit 2."""

import json
import subprocess
import sys

import pytest
from verl_files import REPEATS, combined_rows, write

from parathink import cli


def _describe(capsys, spec):
    rc = cli.main(["data", "describe", spec])
    out, err = capsys.readouterr()
    return rc, out, err


def test_describe_a_combined_file(tmp_path, capsys):
    path = write(tmp_path / "evals.parquet", combined_rows("parallel_r1"))
    rc, out, err = _describe(capsys, f"{{source: verl, uri: {path}}}")
    assert rc == 0 and err == ""
    doc = json.loads(out)  # the whole of stdout is the one object
    assert set(doc) == {"n", "sources", "samples"} and doc["n"] == 7
    assert doc["sources"] == {"APO_AIME24": {"n": 2, "repeats": REPEATS}, "APO_AIME25": {"n": 1, "repeats": REPEATS},
                              "APO_AMC23": {"n": 1, "repeats": REPEATS}, "APO_MATH300": {"n": 3, "repeats": 1}}
    # three samples, one from each set in turn, wrappers stripped
    assert [(s["data_source"], s["answer"]) for s in doc["samples"]] == [
        ("APO_AIME24", "1"), ("APO_AIME25", "9"), ("APO_AMC23", "\\frac{5}{6}")]
    assert doc["samples"][0] == {"id": "verl-APO_AIME24-0", "source": "verl", "data_source": "APO_AIME24",
                                 "problem": "Find the remainder when $7^{2024}$ is divided by $100$.", "answer": "1",
                                 "repeats": REPEATS}


def test_describe_one_set_of_a_file_on_s3_and_a_hub_layout_file(s3_client, tmp_path, capsys):
    s3_client.create_bucket(Bucket="evals")
    s3_client.upload_file(str(write(tmp_path / "test.parquet", combined_rows("baseline"))), "evals", "pr1/test.parquet")
    rc, out, _ = _describe(capsys, '{"source": "verl", "uri": "s3://evals/pr1/test.parquet", "data_source": "APO_AMC23"}')
    assert rc == 0
    doc = json.loads(out)
    assert doc["n"] == 1 and doc["sources"] == {"APO_AMC23": {"n": 1, "repeats": REPEATS}}
    assert doc["samples"][0]["problem"] == "What is $\\frac{1}{2}+\\frac{1}{3}$?"
    # a hub layout's file: grouped by source; YAML block style works as well as flow style
    gsm = tmp_path / "gsm8k.jsonl"
    gsm.write_text(('{"question": "What is 2+2?", "answer": "2+2=4\\n#### 4"}\n'
                    '{"question": "What is 3+3?", "answer": "#### 6"}\n') * 2)
    rc, out, _ = _describe(capsys, f"source: gsm8k\nuri: {gsm}\n")
    assert rc == 0 and json.loads(out)["sources"] == {"gsm8k": {"n": 2, "repeats": 2}}


def test_describe_says_when_rows_per_problem_differ(tmp_path, capsys):
    rows = combined_rows()[:-4]  # the last AMC row and the MATH rows cut: AMC23 x3
    rows += [rows[0]]  # and one AIME24 problem once more: x5 beside x4
    rc, out, err = _describe(capsys, f"{{source: verl, uri: {write(tmp_path / 'cut.jsonl', rows)}}}")
    assert rc == 0 and json.loads(out)["sources"]["APO_AIME24"] == {"n": 2, "repeats": 4}
    assert "APO_AIME24: rows per problem differ (1 problems x4, 1 problems x5)" in err


@pytest.mark.parametrize("args, message", [
    (["describe", "{source: verl, uri: [unclosed"], "is not YAML/JSON"),
    (["describe", "evals.parquet"], "is not a mapping; expected e.g. '{source: verl, uri: evals.parquet}'"),
    (["describe", "{uri: evals.parquet}"], "has no 'source'"),
    (["describe", "{source: verl}"], "source 'verl' has no hub id; give a local path or s3:// URI"),
    (["describe", "{source: verl, uri: MISSING}"], "no such file or directory"),
    (["describe", "{source: verl, uri: EVALS, data_source: APO_AIME42}"], "no row has data_source APO_AIME42"),
    (["describe", "{source: synthetic, level: easy}"], "lacks ['split', 'n']"),
    (["describe", "{source: [a]}"], "'source' must be a string"),
    (["describe", "{source: " + "[" * 5000 + "]" * 5000 + "}"], "refused, nested deeper than 100 levels"),
    (["describe", "{source: synthetic, n: " + "9" * 5000 + "}"], "refused, it holds a number Python does not convert"),
    (["describe"], "usage: parathink data describe SPEC"),
    (["summarize", "{source: verl}"], "got summarize {source: verl}"),
])
def test_describe_errors_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    evals = write(tmp_path / "evals.parquet", combined_rows())
    args = [a.replace("MISSING", str(tmp_path / "nope.parquet")).replace("EVALS", str(evals)) for a in args]
    rc = cli.main(["data", *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("parathink data: error: ") and message in err


def test_describe_in_a_fresh_process_imports_nothing_heavy(tmp_path):
    path = write(tmp_path / "evals.parquet", combined_rows("qwen_boxed"))
    probe = ("import sys; from parathink.cli import main; rc = main(sys.argv[1:]); "
             "sys.stderr.write('heavy: ' + ' '.join(m for m in ('torch', 'transformers', 'datasets', 'mlflow') "
             "if m in sys.modules)); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", probe, "data", "describe", f"{{source: verl, uri: {path}}}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n"] == 7
    assert proc.stderr.strip() == "heavy:"

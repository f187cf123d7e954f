"""``parathink score`` end to end through the real entry point (a subprocess, as users run it)."""

import json
import subprocess
import sys

import pytest

CASES = [
    ("a <Parallel><Path>x</Path><Path>y</Path></Parallel><Summary>s</Summary> \\boxed{4}", "4", []),
    ("<Parallel><Path>x</Path></Parallel><Summary>s</Summary>", "1", ["too_few_paths"]),
    ("<Parallel><Path> </Path><Path>y</Path></Parallel><Summary>s</Summary>", "1", ["empty_path"]),
    ("x </Path>", "1", ["stray_tag"]),
    ("<Parallel><Path>x</Path><Path>y</Path>", "1", ["unclosed_tag"]),
    ("<Parallel><Path>x</Path><Path>y</Path></Parallel> no summary", "1", ["missing_summary"]),
    ("<Parallel><Path>x</Path><Parallel>", "1", ["nested_block", "unclosed_tag"]),
    ("<Parallel><Path>x</Path> hi <Path>y</Path></Parallel><Summary>s</Summary>", "1", ["text_between_paths"]),
    ("<Parallel><Path>x</Path><Path>y</Path></Parallel><Summary> </Summary>", "1", ["empty_summary"]),
    ("plain \\boxed{3}", "3", []),
]


def run(*args, input_text=None):
    return subprocess.run([sys.executable, "-m", "parathink.cli", *args], capture_output=True, text=True,
                          input=input_text)


def test_score_agrees_with_grammar(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"response": r, "answer": a}) + "\n" for r, a, _ in CASES))
    out = tmp_path / "out.jsonl"
    res = run("score", str(src), "--scheme", "parallel_x_accuracy", "--output", str(out))
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(CASES)
    for (resp, _, errors), row in zip(CASES, rows):
        assert row["errors"] == errors, resp
        assert row["valid"] == (not errors)
    assert rows[0] == {"valid": True, "parallel": True, "blocks": 1, "errors": [],
                       "relative_position": pytest.approx(2 / len(CASES[0][0])), "extracted": "4",
                       "correct": True, "reward": 1.0}
    assert rows[-1]["parallel"] is False and rows[-1]["relative_position"] is None
    assert rows[-1]["correct"] is True and rows[-1]["reward"] == -1.0
    summary = res.stderr.strip().splitlines()[-1]
    assert summary.startswith("n=10 valid_rate=0.200 parallel_rate=0.100")
    assert "accuracy=0.200" in summary


def test_other_formats_and_no_answer(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "<think1>a</think1><think2>b</think2><summary>s</summary>"}) + "\n")
    res = run("score", str(src), "--format", "parathinker")
    row = json.loads(res.stdout)
    assert res.returncode == 0 and row["parallel"] and "correct" not in row


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        (b'{"response": "x"}\nnot json\n', ":2: not JSON"),
        (b'{"response": "x"}\n{"text": "y"}\n', ":2: record has no string 'response' field"),
        (b'{"response": "x"}\n\xff\xfe\n', ":2: not UTF-8"),
        (b'[1, 2]\n', ":1: expected a JSON object"),
        # issue 48: past the decoder's stack, and past int()'s digit limit: a rejected record, not a traceback
        (b'{"response": "x"}\n{"response": ' + b"[" * 100_000 + b"]" * 100_000 + b'}\n',
         ":2: refused: nested deeper than 100 levels"),
        (b'{"response": "x", "answer": ' + b"9" * 5000 + b'}\n', ":1: refused: an integer of more than 4300 digits"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, message):
    src = tmp_path / "in.jsonl"
    if content is not None:
        src.write_bytes(content)
    out = tmp_path / "out.jsonl"
    res = run("score", str(src), "--output", str(out))
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not out.exists()  # nothing half-written


def test_scheme_needs_answer(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "x"}) + "\n")
    res = run("score", str(src), "--scheme", "accuracy")
    assert res.returncode == 2 and ":1: record has no 'answer' field" in res.stderr
    res = run("score", str(src), "--scheme", "nope")
    assert res.returncode == 2 and "unknown reward scheme 'nope'" in res.stderr


def test_output_that_is_a_directory_is_one_line_and_leaves_no_temp_file(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "x"}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    res = run("score", str(src), "--output", str(out))
    assert res.returncode == 2 and str(out) in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out"] and not list(out.iterdir())


def test_output_gets_the_usual_permissions(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "x"}) + "\n")
    res = subprocess.run(["sh", "-c", f"umask 022 && {sys.executable} -m parathink.cli score {src} "
                                      f"--output {tmp_path / 'out.jsonl'}"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("answer, kind", [(["1"], "list"), (True, "bool"), ({"a": 1}, "dict")])
def test_an_answer_of_the_wrong_type_is_one_line(tmp_path, answer, kind):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "\\boxed{1}", "answer": answer}) + "\n")
    res = run("score", str(src))
    assert res.returncode == 2 and f":1: 'answer' must be a string or a number, got {kind}" in res.stderr, res.stderr


def test_a_lone_surrogate_is_scored_not_a_crash(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "\\\\boxed{\\ud800}", "answer": "1"}\n')
    res = run("score", str(src), "--output", str(tmp_path / "out.jsonl"))
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "out.jsonl").read_text())["correct"] is False

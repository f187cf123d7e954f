"""Expectations and verdicts: NaN never passes, a check that does not apply never fails, one-line summaries."""

import math

from parathink.quality.expectations import (
    Verdict,
    at_least,
    at_most,
    equals,
    markdown_table,
    not_applicable,
    summary_line,
    text_table,
)


def test_comparisons_and_nan():
    assert at_least("r", 0.5, 0.5).passed and not at_least("r", 0.49, 0.5).passed
    assert at_most("kl", 0.1, 0.5).passed and not at_most("kl", 0.6, 0.5).passed
    for bad in (math.nan, math.inf, None, "0.9"):
        assert at_least("r", bad, 0.0).passed is False  # a figure that is not a finite number fails
    assert at_most("kl", math.nan, 1.0).passed is False
    assert equals("steps", 52, 204).passed is False and equals("steps", 204, 204).passed
    assert not_applicable("kl", "kl_coef=0").passed is None


def test_verdict_passes_fails_or_is_disabled():
    ok = Verdict("sft", True, {}, [at_least("a", 1.0, 0.5), not_applicable("kl", "no reference")])
    bad = Verdict("sft", True, {}, [at_least("a", 0.014, 0.5, "256 samples"), equals("steps", 52, 204)])
    assert ok.passed is True and bad.passed is False and Verdict("sft", False, {}).passed is None
    assert Verdict("sft", True, {}, [], error="RuntimeError: oom").passed is False
    assert summary_line(bad) == "sft: 2 of 2 expectations failed: a 0.014 < 0.5 (256 samples); steps 52 != 204"
    back = Verdict.from_record(bad.to_record())
    assert back.to_record() == bad.to_record() and back.passed is False


def test_records_are_strict_json_and_tables_show_every_check():
    v = Verdict("rl_hard", True, {"max_kl": 0.5}, [at_most("kl", math.nan, 0.5), not_applicable("parallel_rate",
                                                                                               "no floor")])
    assert v.to_record()["expectations"][0]["observed"] == "nan"
    lines = text_table(v)
    assert lines[0].split() == ["expectation", "observed", "threshold", "result", "note"]
    assert lines[1].split() == ["kl", "nan", "<=", "0.5", "FAIL"]
    assert lines[2].split()[:3] == ["parallel_rate", "-", "-"] and lines[2].split()[3:] == ["n/a", "no", "floor"]
    assert "# rl_hard gate: FAILED" in markdown_table(v) and "| kl | nan | <= 0.5 | FAIL |  |" in markdown_table(v)

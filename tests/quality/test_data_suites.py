"""great-expectations suites of the data gates: a good set passes with data docs; a bad set fails with every
failed expectation's observed value."""

import pytest

from parathink.quality import data_suites
from parathink.quality.data_gates import raw_rows
from parathink.quality.traces import FilterConfig, Judged, filter_records

GOOD = "<Parallel>\n<Path>\nA \\boxed{5}\n</Path>\n<Path>\nB \\boxed{5}\n</Path>\n</Parallel>\n" \
       "<Summary>\n5\n</Summary>\n\\boxed{5}"


def _records(n, response=GOOD):
    return [(i, {"id": f"p{i}", "source": "s", "problem": f"problem {i}", "answer": "5", "response": response})
            for i in range(n)]


def _suites(judged, accepted, min_valid_rate, min_accepted, bounds):
    gx = data_suites.gx_module()
    rows = [{"id": j.record["id"], "source": "s", "valid": int(j.valid), "parallel": int(j.parallel),
             "length": j.length} for j in judged]
    return {"raw_traces": (data_suites.raw_frame(rows), data_suites.raw_checks(gx, min_valid_rate)),
            "accepted_traces": (data_suites.accepted_frame(accepted),
                                data_suites.accepted_checks(gx, min_accepted, bounds))}


def test_good_set_passes_and_renders_data_docs(tmp_path):
    result = filter_records(_records(5), FilterConfig())
    checks, docs = data_suites.validate(_suites(result.judged, result.accepted, 0.9, 5, FilterConfig()),
                                        tmp_path / "docs")
    assert [e.name for e in checks] == ["raw.records", "raw.valid_rate", "accepted.records",
                                        "accepted.duplicate_problems", "accepted.missing_answer",
                                        "accepted.missing_extracted", "accepted.empty_paths",
                                        "accepted.length_out_of_bounds"]
    assert all(e.passed for e in checks), checks
    assert docs == str(tmp_path / "docs" / "index.html") and (tmp_path / "docs" / "index.html").exists()


def test_bad_set_fails_with_observed_values(tmp_path):
    stray = {"id": "x", "source": "s", "problem": "q", "answer": "5", "response": "<Path> stray"}
    items = _records(2) + [(9, stray)] * 3
    result = filter_records(items, FilterConfig(one_per_problem=False))
    # A permissive filter let a duplicate and an over-long trace through: the gate must still catch them.
    dup = result.accepted[0]
    accepted = result.accepted + [Judged({**dup.record, "id": "dup"}, True, True, True, "5", 10_000, 1, 0)]
    checks, docs = data_suites.validate(_suites(result.judged, accepted, 0.8, 10, FilterConfig(max_chars=4000)), None)
    assert docs is None
    failed = {e.name: (e.observed, e.threshold, e.note) for e in checks if e.passed is False}
    assert failed == {"raw.valid_rate": (pytest.approx(2 / 5), 0.8, ""),
                      "accepted.records": (3, 10, ""),
                      "accepted.duplicate_problems": (2, 0, "e.g. ['problem 0', 'problem 0']"),
                      "accepted.length_out_of_bounds": (1, 0, "chars in [1, 4000]; e.g. [10000]")}


def test_raw_rows_skip_unusable_lines(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"id": "a", "problem": "p", "answer": "1", "response": "x \\\\boxed{1}"}\n{oops\n'
                   '{"id": "b", "problem": "p", "answer": "1", "response": "<Path>"}\n')
    assert [(r["id"], r["valid"], r["parallel"]) for r in raw_rows(raw, "parallel_r1")] == [("a", 1, 0), ("b", 0, 0)]

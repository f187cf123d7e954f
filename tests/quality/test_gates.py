"""great-expectations gates: a good set passes; a bad set fails with every expectation's observed value."""

import pytest

from parathink.quality import GateFailed
from parathink.quality.gates import GateConfig, describe_failures, raise_if_failed, run_gates
from parathink.quality.traces import FilterConfig, Judged, filter_records

GOOD = "<Parallel>\n<Path>\nA \\boxed{5}\n</Path>\n<Path>\nB \\boxed{5}\n</Path>\n</Parallel>\n" \
       "<Summary>\n5\n</Summary>\n\\boxed{5}"


def _records(n, response=GOOD):
    return [(i, {"id": f"p{i}", "source": "s", "problem": f"problem {i}", "answer": "5", "response": response})
            for i in range(n)]


def test_good_set_passes_and_renders_data_docs(tmp_path):
    result = filter_records(_records(5), FilterConfig())
    report = run_gates(result, GateConfig(min_valid_rate=0.9, min_accepted=5), FilterConfig(), tmp_path / "docs")
    assert report["success"], describe_failures(report)
    assert report["data_docs"] == str(tmp_path / "docs" / "index.html") and (tmp_path / "docs/index.html").exists()
    assert len(report["expectations"]) == 8
    raise_if_failed(report, str(tmp_path))  # passes silently


def test_bad_set_fails_with_observed_values(tmp_path):
    items = _records(2) + [(9, {"id": "x", "source": "s", "problem": "q", "answer": "5", "response": "<Path> stray"})] * 3
    result = filter_records(items, FilterConfig(one_per_problem=False))
    # A permissive filter let a duplicate and an over-long trace through: the gate must still catch them.
    dup = result.accepted[0]
    result.judged.append(Judged({**dup.record, "id": "dup"}, True, True, True, "5", 10_000, 1, 0))
    report = run_gates(result, GateConfig(min_valid_rate=0.8, min_accepted=10), FilterConfig(max_chars=4000), None)
    assert not report["success"] and report["data_docs"] is None
    failed = {e["expectation"]: e["observed"] for e in report["expectations"] if not e["success"]}
    assert failed["expect_column_mean_to_be_between"] == pytest.approx(3 / 6)
    assert failed["expect_table_row_count_to_be_between"] == 3
    assert failed["expect_column_values_to_be_unique"]["unexpected_count"] == 2
    assert failed["expect_column_values_to_be_between"]["examples"] == [10_000]
    with pytest.raises(GateFailed, match=r"4 expectation\(s\) failed: raw_traces: expect_column_mean_to_be_between"
                                         r"\(column=valid, min_value=0.8, max_value=1.0\) observed 0.5") as e:
        raise_if_failed(report, str(tmp_path))
    assert len(e.value.failures) == 4 and e.value.report_dir == str(tmp_path)

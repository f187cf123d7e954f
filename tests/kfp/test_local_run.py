"""`parathink kfp run --local`: the compiled pipeline's tasks run through kfp.local on this machine."""

from __future__ import annotations

import json

import pytest
from kfp_helpers import CHEAP, parathink


def _run_local(run_dir, *extra: str):
    return parathink("kfp", "run", "--local", *CHEAP, f"run_dir={run_dir}", *extra)


@pytest.mark.slow
def test_local_run_gate_stop_and_rerun(tmp_path):
    run_dir = tmp_path / "run"
    done = _run_local(run_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for stage in ("teacher", "filter"):
        manifest = json.loads((run_dir / stage / "_manifest.json").read_text())
        assert manifest["stage"] == stage
    assert (run_dir / "filter" / "accepted.jsonl").stat().st_size > 0
    published = (run_dir / "filter" / "_manifest.json").read_text()

    # An unreachable gate: the pipeline stops at filter with exit 3, as `parathink run` does. The threshold is not part
    # of the config hash: the published traces are judged again, not filtered again, and keep their output hash.
    gated = _run_local(run_dir, "filter.gate.min_accepted=100000")
    assert gated.returncode == 3, gated.stderr[-3000:]
    assert gated.stderr.strip().splitlines()[-1] == "parathink: error: the pipeline stopped at stage filter (exit 3)"
    assert "quality gate failed" in gated.stdout and "report.json" in gated.stdout
    judged = json.loads((run_dir / "filter" / "_manifest.json").read_text())
    assert judged["gates"]["passed"] is False and judged["output_hash"] == json.loads(published)["output_hash"]

    # KFP caching is off; the manifests decide. Same parameters, so a KFP cache would have served both tasks from
    # the first run; the runner skips teacher (unchanged) and reruns filter, whose published output was altered.
    with (run_dir / "filter" / "accepted.jsonl").open("a") as f:
        f.write("{}\n")
    again = _run_local(run_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "teacher: skipped (up to date)" in again.stdout
    assert "filter: running (published files missing or altered)" in again.stdout

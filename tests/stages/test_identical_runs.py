"""Two identical runs (same commit, config and seed) into two run directories publish the same output hashes
(issue 43, docs/reliability.md "What is hashed and why").

Each run is a process of its own under another PYTHONHASHSEED, as two `parathink run`s are: whatever depends on a
set's order, the run directory's path or the clock shows as a hash that differs. base, teacher and filter of the
tiny default (the self teacher sampling the shipped base), on 8 problems.
"""

import json
import os
import re
import subprocess
import sys

from parathink.rundir import timings
from parathink.rundir.manifest import MANIFEST

STAGES = ("base", "teacher", "filter")


def _run(run_dir, hash_seed: str) -> tuple[dict[str, dict], dict[str, str]]:
    """(each stage's manifest, each stage's output hash as the log printed it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "parathink.cli", "run", f"stages=[{','.join(STAGES)}]", f"run_dir={run_dir}",
         "tracking=none", "teacher.limit=8"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true", "PYTHONHASHSEED": hash_seed})
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = dict(re.findall(r"\[parathink\] (\w+): done in [\d.]+ s, output (\w+)", proc.stderr))
    return {s: json.loads((run_dir / s / MANIFEST).read_text()) for s in STAGES}, printed


def test_two_identical_runs_into_two_directories_publish_the_same_hashes(tmp_path):
    (a, printed_a), (b, printed_b) = _run(tmp_path / "a", "1"), _run(tmp_path / "b", "2")
    for stage in STAGES:  # file by file first: a failure names the file that differs
        assert {rel: m["sha256"] for rel, m in a[stage]["outputs"].items()} == \
               {rel: m["sha256"] for rel, m in b[stage]["outputs"].items()}, stage
    assert {s: a[s]["output_hash"] for s in STAGES} == {s: b[s]["output_hash"] for s in STAGES} == printed_a == printed_b
    # The times are not lost: beside the output, outside its hash, and each run's own.
    assert timings.TIMINGS not in a["filter"]["outputs"] and timings.read(tmp_path / "a" / "filter")["filter_seconds"] >= 0
    assert "filter_seconds" not in (tmp_path / "a" / "filter" / "report.json").read_text()

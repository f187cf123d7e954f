"""The filter stage: teacher -> filter on the synthetic set; a bad set stops `parathink stage filter` with exit 3
after publishing its outputs and its gate's report."""

import json
import subprocess
import sys

from hydra import compose, initialize_config_dir

from parathink.pipeline.compose import config_dir
from parathink.rundir import timings
from parathink.stages import filter as filter_stage
from parathink.stages import teacher
from parathink.stages.context import StageContext


def _cfg(*overrides):
    with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
        return compose(config_name="config", overrides=list(overrides))


def test_teacher_then_filter_accepts_traces_and_reports(tmp_path):
    cfg = _cfg("teacher.backend=scripted", "data.cold_start.0.n=30", "data.cold_start.1.n=30",
               "filter.gate.data_docs=false")
    t_ctx = StageContext.standalone("teacher", tmp_path)
    t_ctx.progress = False
    teacher.run(cfg, t_ctx)
    # One record of the raw file is spoiled (wrong answer) and one line is garbage: both must be accounted for.
    raw = t_ctx.out_dir / "raw.jsonl"
    lines = raw.read_text().splitlines()
    spoiled = json.loads(lines[0])
    spoiled["answer"] = str(int(spoiled["answer"]) + 1)
    raw.write_text("\n".join([json.dumps(spoiled)] + lines[1:] + ["{oops"]) + "\n")
    filter_stage.validate(cfg)
    f_ctx = StageContext.standalone("filter", tmp_path)
    metrics = filter_stage.run(cfg, f_ctx)
    accepted = [json.loads(x) for x in (f_ctx.out_dir / "accepted.jsonl").read_text().splitlines()]
    rejected = [json.loads(x) for x in (f_ctx.out_dir / "rejected.jsonl").read_text().splitlines()]
    report = json.loads((f_ctx.out_dir / "report.json").read_text())
    assert len(accepted) == 59 and [r["reasons"] for r in rejected] == [["incorrect"]]
    assert report["bad_lines"] == 1 and report["bad_line_list"][0]["line"] == 61
    # Named as the run names it, with no time: the same traces give the same report in any run directory.
    assert report["input"] == report["bad_line_list"][0]["file"] == "teacher/raw.jsonl"
    assert "filter_seconds" not in report and timings.read(f_ctx.out_dir)["filter_seconds"] >= 0
    assert report["per_level"]["hard"]["accepted"] == 30 and report["reasons"] == {"incorrect": 1}
    assert metrics["accepted"] == 59.0


def test_cli_gate_failure_exits_3_and_keeps_report_and_data_docs(tmp_path):
    raw = tmp_path / "raw.jsonl"
    with raw.open("w") as f:
        for i in range(10):  # 2 of 10 traces in valid parallel format: far below min_valid_rate
            resp = "<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary>\\boxed{1}" if i < 2 \
                else "<Path>unclosed \\boxed{1}"
            f.write(json.dumps({"id": f"q{i}", "source": "t", "problem": f"p{i}", "answer": "1", "response": resp}) + "\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parathink.cli", "stage", "filter", f"run_dir={tmp_path / 'run'}", "tracking=none",
         f"filter.input={raw}", f"filter.output={out}", "filter.gate.min_valid_rate=0.8"],
        capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "CI": "true"})
    assert proc.returncode == 3, proc.stderr[-2000:]
    # The raw suite runs on traces from outside the run (no teacher gate saw them); the table is in the log.
    assert "raw.valid_rate                 0.2       >= 0.8     FAIL" in proc.stderr
    assert "filter: 1 of 9 expectations failed: raw.valid_rate 0.2 < 0.8. Report: " in proc.stderr.splitlines()[-1]
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["valid_rate"] == 0.2 and (out / "accepted.jsonl").exists()
    published = tmp_path / "run" / "filter"
    assert (published / "_gates" / "data_docs" / "index.html").exists()
    gates = json.loads((published / "_manifest.json").read_text())["gates"]  # published, marked as not passed
    assert gates["passed"] is False and gates["data_docs"] == "_gates/data_docs/index.html"

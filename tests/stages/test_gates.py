"""The runner's quality gates on the plug-in test stages: recorded beside the output, exit 3 after publishing,
nothing downstream, a threshold fix re-evaluates without recomputing, a config fix recomputes the stage and what
follows (docs/gates.md)."""

import json
from pathlib import Path

from parathink.pipeline import runner
from parathink.rundir.manifest import MANIFEST

GATED = str(Path(__file__).with_name("gated_stage.py"))


def gated(c, *extra: str, min_value=10, stages=("prep", "train", "tune")) -> list[str]:
    """prep -> train (with a gate: its value, 13 by default, must reach ``min_value``) -> tune."""
    return c.overrides(f"stage_modules.train={GATED}", "+train.gate.enabled=true", f"+train.gate.min_value={min_value}",
                       "+train.gate.crash=false", *extra, stages=stages)


def manifest(c, stage) -> dict:
    return json.loads((Path(c.run_dir) / stage / MANIFEST).read_text())


def test_a_passing_gate_is_recorded_beside_the_output(curriculum, capsys):
    assert runner.main_run(gated(curriculum)) == 0
    gates = manifest(curriculum, "train")["gates"]
    assert gates["passed"] is True and gates["config"] == {"enabled": True, "min_value": 10, "crash": False}
    assert [(e["name"], e["observed"], e["op"], e["threshold"], e["passed"]) for e in gates["expectations"]] == [
        ("value", 13, ">=", 10, True), ("kl", None, "n/a", None, None)]
    folder = Path(curriculum.run_dir) / "train"
    assert json.loads((folder / "_gates" / "report.json").read_text()) == gates
    assert "| value | 13 | >= 10 | pass | value.txt |" in (folder / "_gates" / "report.md").read_text()
    assert not any(rel.startswith("_gates") for rel in manifest(curriculum, "train")["outputs"])  # not hashed
    assert "gates" not in manifest(curriculum, "prep") or manifest(curriculum, "prep")["gates"] is None
    err = capsys.readouterr().err
    assert "[parathink] train gate: passed" in err and "[parathink]   value        13        >= 10      pass" in err
    assert json.loads((Path(curriculum.run_dir) / "run.json").read_text())["stages"]["train"]["gate_passed"] is True


def test_a_failed_gate_publishes_stops_and_a_threshold_fix_reevaluates_only(curriculum, capsys):
    assert runner.main_run(gated(curriculum, min_value=100)) == 3
    assert curriculum.ran() == ["prep", "train"]  # tune never started
    run = Path(curriculum.run_dir)
    assert (run / "train" / "value.txt").read_text() == "13"  # published for inspection
    assert manifest(curriculum, "train")["gates"]["passed"] is False
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"parathink: quality gate failed: train: 1 of 2 expectations failed: value 13 < 100 (value.txt). "
                    f"Report: {run}/train/_gates/report.json; outputs kept in {run}/train for inspection, nothing "
                    "downstream runs")
    assert json.loads((run / "run.json").read_text())["stages"]["train"]["status"] == "gate_failed"

    # The same config again: the recorded verdict stands, at once; train is not recomputed.
    assert runner.main_run(gated(curriculum, min_value=100)) == 3
    assert curriculum.ran() == ["prep", "train"]
    # A downstream stage on its own stops when it asks for an output that failed its gate: exit 3, nothing made.
    assert runner.main_stage("tune", gated(curriculum, min_value=100)) == 3
    assert "the output of 'train' did not pass its quality gate" in capsys.readouterr().err
    assert not (run / "tune").exists()

    published = manifest(curriculum, "train")["output_hash"]
    assert runner.main_run(gated(curriculum, min_value=13)) == 0  # the threshold fixed: re-evaluated, not re-run
    assert curriculum.ran() == ["prep", "train", "tune", "tune"]  # tune: the refused call above, then this run
    assert "train: evaluating its gate on the published output (its gate settings changed)" in capsys.readouterr().err
    after = manifest(curriculum, "train")
    assert after["output_hash"] == published and after["gates"]["passed"] is True
    assert after["gates"]["config"]["min_value"] == 13


def test_a_config_fix_reruns_the_stage_and_what_follows(curriculum):
    assert runner.main_run(gated(curriculum, min_value=15)) == 3  # 13 < 15
    assert runner.main_run(gated(curriculum, "train.steps=5", min_value=15)) == 0  # 3 + 15 = 18
    assert curriculum.ran() == ["prep", "train", "train", "tune"]  # prep was good: not run again
    assert manifest(curriculum, "train")["gates"]["passed"] is True


def test_a_disabled_gate_warns_and_enabling_it_evaluates_the_published_output(curriculum, capsys):
    assert runner.main_run(gated(curriculum, "train.gate.enabled=false", min_value=100)) == 0
    assert "warning: train: quality gate disabled (train.gate.enabled=false)" in capsys.readouterr().err
    gates = manifest(curriculum, "train")["gates"]
    assert gates["enabled"] is False and gates["passed"] is None and gates["expectations"] == []
    assert runner.main_run(gated(curriculum, min_value=100)) == 3  # switched on: judged without a rerun
    assert curriculum.ran() == ["prep", "train", "tune"]


def test_a_gate_that_cannot_be_evaluated_keeps_the_output_and_is_evaluated_next_time(curriculum, capsys):
    assert runner.main_run(gated(curriculum, "train.gate.crash=true")) == 1
    assert "RuntimeError: the gate's probe ran out of memory" in capsys.readouterr().err
    gates = manifest(curriculum, "train")["gates"]
    assert gates["passed"] is False and gates["error"].startswith("RuntimeError")
    assert runner.main_run(gated(curriculum)) == 0
    assert "train: evaluating its gate on the published output (no verdict yet)" in capsys.readouterr().err
    assert curriculum.ran() == ["prep", "train", "tune"]  # train trained once


def test_bad_thresholds_are_one_line_before_any_stage(curriculum, capsys):
    assert runner.main_run(gated(curriculum, "train.gate.min_value=lots")) == 2
    assert capsys.readouterr().err.strip() == "parathink: error: train.gate.min_value: must be a number, got 'lots'"
    assert curriculum.ran() == []


def test_on_s3_a_failed_verdict_is_published_and_a_new_threshold_republishes_it(curriculum, tmp_path):
    from servers import moto_s3

    from parathink import storage

    with moto_s3("runs"):
        curriculum.run_dir = "s3://runs/exp1"
        cache = f"cache_dir={tmp_path / 'cache'}"
        assert runner.main_run(gated(curriculum, cache, min_value=100)) == 3
        uri = "s3://runs/exp1/train"
        assert json.loads(storage.read_text(f"{uri}/_manifest.json"))["gates"]["passed"] is False
        assert "| value | 13 | >= 100 | FAIL | value.txt |" in storage.read_text(f"{uri}/_gates/report.md")
        assert runner.main_run(gated(curriculum, cache, min_value=10)) == 0
        assert json.loads(storage.read_text(f"{uri}/_manifest.json"))["gates"]["passed"] is True
        assert "| value | 13 | >= 10 | pass |" in storage.read_text(f"{uri}/_gates/report.md")
        assert curriculum.ran() == ["prep", "train", "tune"]

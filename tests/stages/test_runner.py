"""The runner: validation before any stage, skip when unchanged, rerun on change, atomic publish, exit codes."""

import json
from pathlib import Path

import pytest

from parathink.pipeline import runner
from parathink.rundir.manifest import MANIFEST


def manifest(run_dir, stage) -> dict:
    return json.loads((Path(run_dir) / stage / MANIFEST).read_text())


def test_chain_runs_then_skips(curriculum):
    assert runner.main_run(curriculum.overrides()) == 0
    assert curriculum.ran() == ["prep", "train", "tune"]
    run = Path(curriculum.run_dir)
    # prep: 1+2 = 3; train: 3 + (1+2+3+4) = 13; tune: 13 + 6 = 19 -- each stage read its input
    assert (run / "tune" / "value.txt").read_text() == "19"
    m = manifest(run, "tune")
    assert m["inputs"] == {"train": manifest(run, "train")["output_hash"]}
    assert set(m["outputs"]) == {"value.txt", "metrics.jsonl", "model/config.json", "model/weights.bin"}
    assert m["metrics"]["total"] == 6.0 and m["duration_s"] >= 0
    assert not (run / ".work" / "train").exists()  # scratch cleared once published
    meta = json.loads((run / "run.json").read_text())
    assert set(meta["stages"]) == {"prep", "train", "tune"}

    assert runner.main_run(curriculum.overrides()) == 0
    assert curriculum.ran() == ["prep", "train", "tune"]  # nothing ran again


def test_config_change_reruns_the_stage_and_its_dependents(curriculum):
    assert runner.main_run(curriculum.overrides()) == 0
    assert runner.main_run(curriculum.overrides("tune.steps=2")) == 0
    assert curriculum.ran() == ["prep", "train", "tune", "tune"]
    assert runner.main_run(curriculum.overrides("prep.steps=3", "tune.steps=2")) == 0
    assert curriculum.ran()[4:] == ["prep", "train", "tune"]  # new prep output -> train, tune inputs changed
    assert (Path(curriculum.run_dir) / "tune" / "value.txt").read_text() == str(6 + 10 + 3)


def test_shared_key_change_reruns(curriculum):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert runner.main_run(curriculum.overrides("seed=5", stages=("prep",))) == 0
    assert curriculum.ran() == ["prep", "prep"]


def test_tampered_output_reruns_and_force(curriculum):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    (Path(curriculum.run_dir) / "prep" / "value.txt").unlink()
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert runner.main_run(curriculum.overrides("force=[prep]", stages=("prep",))) == 0
    assert curriculum.ran() == ["prep", "prep", "prep"]


def test_main_stage_runs_one(curriculum):
    assert runner.main_stage("prep", curriculum.overrides()) == 0
    assert runner.main_stage("train", curriculum.overrides()) == 0
    assert runner.main_stage("train", curriculum.overrides()) == 0
    assert curriculum.ran() == ["prep", "train"]


def test_missing_input_is_exit_2(curriculum, capsys):
    assert runner.main_stage("train", curriculum.overrides()) == 2
    assert "needs outputs of 'prep'" in capsys.readouterr().err


@pytest.mark.parametrize("override, needle", [
    ("prep.stepz=3", "prep.stepz"),
    ("sft.lrr=1", "sft.lrr"),
    ("nosuchkey=1", "nosuchkey"),
    ("experiment=nope", "experiment/nope"),
    ("prep.steps=0", "prep.steps"),  # the stage module's validate()
    ("stages=[prep,nosuchstage]", "nosuchstage"),
])
def test_bad_config_is_one_line_before_any_stage(curriculum, capsys, override, needle):
    assert runner.main_run(curriculum.overrides(override)) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert curriculum.ran() == []


def test_a_torchrun_launch_runs_data_parallel_stages_on_every_process_and_the_rest_on_rank_0(tmp_path, torchrun):
    """Two real processes: `solo` and `last` run on rank 0 while the other waits, `par` (DATA_PARALLEL) runs on
    both and sums their ranks over the launch's process group; rank 0 alone publishes; a relaunch skips all."""
    here = Path(__file__).parent
    run, calls = tmp_path / "run", tmp_path / "calls.jsonl"
    args = [f"run_dir={run}", "tracking=none", "stages=[solo,par,last]",
            f"+stage_modules.solo={here / 'rank_stage.py'}", f"+stage_modules.par={here / 'rank_stage_parallel.py'}",
            f"+stage_modules.last={here / 'rank_stage.py'}", f"+solo.calls={calls}", f"+par.calls={calls}",
            f"+last.calls={calls}", "+par.input=solo", "+par.collective=true", "+last.input=par"]

    proc = torchrun("-m", "parathink.cli", "run", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert sorted((c["stage"], c["rank"]) for c in ran) == [("last", 0), ("par", 0), ("par", 1), ("solo", 0)]
    assert [(run / s / "value.txt").read_text() for s in ("solo", "par", "last")] == ["10", "23", "33"]
    metrics = manifest(run, "par")["metrics"]  # rank 0's manifest, written once
    assert metrics["rank"] == 0.0 and set(metrics) == {"rank", "peak_rss_mb"} and metrics["peak_rss_mb"] > 10
    assert set(json.loads((run / "run.json").read_text())["stages"]) == {"solo", "par", "last"}
    assert proc.stderr.count("par: running on 2 processes") == 1 and "solo: running (" in proc.stderr
    assert not list((run / ".tmp").iterdir()) and not list((run / ".work").iterdir())

    proc = torchrun("-m", "parathink.cli", "run", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(calls.read_text().splitlines()) == 4  # nothing ran again, on either process
    assert proc.stderr.count("skipped (up to date)") == 3  # said once, by rank 0


def test_a_process_failing_under_torchrun_ends_the_launch_instead_of_hanging_it(tmp_path, torchrun):
    """Rank 0 fails while rank 1 waits inside a collective it will never join: rank 0 must exit at once (no closing
    barrier) so that torchrun stops rank 1; the launch fails within the timeout and publishes nothing."""
    here = Path(__file__).parent
    run, calls = tmp_path / "run", tmp_path / "calls.jsonl"
    proc = torchrun("-m", "parathink.cli", "run", f"run_dir={run}", "tracking=none", "stages=[par]",
                    f"+stage_modules.par={here / 'rank_stage_parallel.py'}", f"+par.calls={calls}",
                    "+par.collective=true", "+par.fail_rank=0", timeout=180)
    assert proc.returncode != 0
    assert "rank 0 fails on purpose" in proc.stderr
    assert not (run / "par").exists()


def test_a_bad_world_size_is_one_line(curriculum, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert runner.main_run(curriculum.overrides()) == 2
    err = capsys.readouterr().err.strip()
    assert err == "parathink: error: WORLD_SIZE='two' is not an integer", err
    assert curriculum.ran() == []


def test_missing_stage_module_is_a_clear_error(curriculum, capsys, tmp_path):
    ovr = curriculum.overrides("+stage_modules.ghost=parathink.stages.ghost_stage_xyz", "+ghost.x=1",
                               stages=("prep", "ghost"))
    assert runner.main_run(ovr) == 2
    assert "parathink.stages.ghost_stage_xyz does not exist" in capsys.readouterr().err
    assert curriculum.ran() == []


def test_failed_stage_publishes_nothing_and_keeps_its_scratch(curriculum):
    assert runner.main_run(curriculum.overrides("+train.fail_at=3")) == 1
    run = Path(curriculum.run_dir)
    assert (run / "prep" / MANIFEST).exists()
    assert not (run / "train").exists()
    assert json.loads((run / ".work" / "train" / "ckpt.json").read_text())["step"] == 2
    # the rerun (failure fixed: a different config discards that scratch) completes the chain
    assert runner.main_run(curriculum.overrides()) == 0
    assert (run / "tune" / "value.txt").read_text() == "19"


def test_gate_failure_is_exit_3_and_stops_the_run(curriculum, capsys):
    assert runner.main_run(curriculum.overrides("+train.gate_at=1")) == 3
    assert "quality gate failed" in capsys.readouterr().err
    assert curriculum.ran() == ["prep", "train"]


def test_resume_from_work_dir_after_interrupt(curriculum):
    """A stage interrupted after 2 checkpointed steps resumes at step 3 with the same config."""
    import parathink.pipeline.runner as r

    cfg = r.compose(curriculum.overrides())
    mods = r.validate(cfg, ["prep"])
    rundir = r.RunDir(str(cfg.run_dir))
    work = rundir.work_dir("prep")
    chash = r.config_hash(r.stage_config(cfg, "prep", mods["prep"].shared_keys))
    (work / r.ATTEMPT).write_text(json.dumps({"config_hash": chash, "attempts": 1}))
    (work / "ckpt.json").write_text(json.dumps({"step": 1, "total": 1}))
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert curriculum.calls_made()[0]["start"] == 1
    assert (Path(curriculum.run_dir) / "prep" / "value.txt").read_text() == "3"


def test_s3_run_dir(curriculum, tmp_path, monkeypatch):
    from servers import moto_s3

    from parathink import storage

    with moto_s3("runs"):
        curriculum.run_dir = "s3://runs/exp1"
        ovr = curriculum.overrides(f"cache_dir={tmp_path / 'cache'}")
        assert runner.main_run(ovr) == 0
        files = storage.list_files("s3://runs/exp1")
        assert "tune/_manifest.json" in files and "train/model/weights.bin" in files and "run.json" in files
        assert storage.read_text("s3://runs/exp1/tune/value.txt") == "19"
        assert runner.main_run(ovr) == 0
        assert curriculum.ran() == ["prep", "train", "tune"]
        assert runner.main_run(curriculum.overrides(f"cache_dir={tmp_path / 'cache'}", "tune.steps=1")) == 0
        assert storage.read_text("s3://runs/exp1/tune/value.txt") == "14"


def _interrupted_attempt(curriculum, stage, step, inputs):
    """Leave ``stage``'s scratch as a kill after checkpoint ``step`` would, made from ``inputs``."""
    cfg = runner.compose(curriculum.overrides())
    module = runner.validate(cfg, [stage])[stage]
    rundir = runner.RunDir(str(cfg.run_dir))
    work = rundir.work_dir(stage)
    chash = runner.config_hash(runner.stage_config(cfg, stage, module.shared_keys))
    (work / runner.ATTEMPT).write_text(json.dumps({"config_hash": chash, "attempts": 1, "inputs": inputs}))
    (work / "ckpt.json").write_text(json.dumps({"step": step, "total": step * (step + 1) // 2}))


def test_scratch_is_resumed_only_on_the_same_inputs(curriculum):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    prep_hash = manifest(curriculum.run_dir, "prep")["output_hash"]
    _interrupted_attempt(curriculum, "train", 2, {"prep": prep_hash})
    assert runner.main_run(curriculum.overrides(stages=("prep", "train"))) == 0
    _interrupted_attempt(curriculum, "tune", 1, {"train": "an-older-output"})
    assert runner.main_run(curriculum.overrides()) == 0
    starts = {c["stage"]: c["start"] for c in curriculum.calls_made()}
    assert starts == {"prep": 0, "train": 2, "tune": 0}  # same inputs: resumed; other inputs: started over
    assert (Path(curriculum.run_dir) / "tune" / "value.txt").read_text() == "19"


def test_demo_prints_the_table_and_the_mlflow_command(curriculum, capsys):
    curriculum.sections["eval"] = {"steps": 1, "results": "[train,tune]"}
    ovr = curriculum.overrides("tracking=jsonl", stages=("prep", "train", "tune", "eval"))
    assert runner.main_demo(ovr) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["stage", "hard", "mean@k"]
    assert lines[2].split()[:2] == ["train", "13.0"] and lines[3].split()[:2] == ["tune", "19.0"]
    assert "curriculum finished in" in out


def test_a_stage_pinning_torch_threads_does_not_leak_into_the_next(curriculum, tmp_path):
    """`parathink run` runs every stage in one process; a stage's torch.set_num_threads must end with it."""
    import torch

    pinning = tmp_path / "pin_threads.py"
    pinning.write_text("import torch\n\ndef run(cfg, ctx):\n    torch.set_num_threads(1)\n    return {}\n")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert runner.main_run(curriculum.overrides(f"stage_modules.prep={pinning}", stages=("prep",))) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

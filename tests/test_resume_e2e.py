"""Reliability: SIGKILL a curriculum run during a training stage, twice, and rerun the same command.

``train`` plays sft and ``tune`` plays rl_hard: checkpointing stages plugged in through ``stage_modules``
(tests/stages/resume_stage.py). After each kill, the rerun must not run finished stages again, must resume
the killed stage from its last checkpoint, must continue the same MLflow run (one continuous metric
history), and no output may be half-written: every published file matches its manifest's hash.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from servers import sqlite_store

import parathink
from parathink.rundir.manifest import MANIFEST, tree_hashes

STAGE_FILE = str(Path(__file__).parent / "stages" / "resume_stage.py")
SRC = str(Path(parathink.__file__).parents[1])


def command(tmp: Path) -> list[str]:
    sections = {"prep": "steps=2", "train": "steps=8 sleep=0.3 input=prep model=true",
                "tune": "steps=6 sleep=0.3 input=train model=true"}
    ovr = [f"run_dir={tmp / 'run'}", "stages=[prep,train,tune]", f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}"]
    for name, kv in sections.items():
        ovr += [f"+stage_modules.{name}={STAGE_FILE}", f"+{name}.calls={tmp / 'calls.jsonl'}"]
        ovr += [f"+{name}.{item}" for item in kv.split()]
    return [sys.executable, "-m", "parathink.cli", "run", *ovr]


def start(tmp: Path) -> subprocess.Popen:
    env = {**os.environ, "CI": "true", "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(command(tmp), cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def kill_when(proc: subprocess.Popen, ckpt: Path, step: int, timeout: float = 240) -> None:
    """SIGKILL the whole run once ``ckpt`` records ``step`` (the stage is mid-training)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ckpt.exists():
            try:
                if json.loads(ckpt.read_text())["step"] >= step:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return
            except (ValueError, KeyError):
                pass
        if proc.poll() is not None:
            pytest.fail(f"run ended before reaching step {step}:\n{proc.stdout.read().decode()[-3000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"{ckpt} never reached step {step}")


def calls(tmp: Path) -> list[tuple[str, int]]:
    return [(c["stage"], c["start"]) for c in map(json.loads, (tmp / "calls.jsonl").read_text().splitlines())]


def assert_published_outputs_intact(run: Path) -> None:
    for manifest in run.glob(f"*/{MANIFEST}"):
        recorded = json.loads(manifest.read_text())
        digest, files = tree_hashes(manifest.parent)
        assert digest == recorded["output_hash"] and files == recorded["outputs"], manifest.parent.name


@pytest.mark.slow
def test_sigkill_during_two_stages_then_resume(tmp_path):
    run = tmp_path / "run"
    sqlite_store(tmp_path / "mlflow.db")
    proc = start(tmp_path)
    kill_when(proc, run / ".work" / "train" / "ckpt.json", 3)
    assert (run / "prep" / MANIFEST).exists() and not (run / "train").exists()
    assert_published_outputs_intact(run)

    proc = start(tmp_path)
    kill_when(proc, run / ".work" / "tune" / "ckpt.json", 2)
    assert (run / "train" / MANIFEST).exists() and not (run / "tune").exists()
    assert_published_outputs_intact(run)

    proc = start(tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert_published_outputs_intact(run)

    made = calls(tmp_path)
    assert [s for s, _ in made] == ["prep", "train", "train", "tune", "tune"]  # finished stages never rerun
    assert made[2][1] >= 3 and made[4][1] >= 2  # the killed stages resumed from their checkpoints
    # the same totals as an uninterrupted run: prep 3, train 3 + 36, tune 39 + 21
    assert (run / "tune" / "value.txt").read_text() == "60"
    assert not [p for p in (run / ".tmp").iterdir() if p.is_dir()]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("parathink-tiny").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    for stage, steps in (("train", 8), ("tune", 6)):
        stage_runs = [r for r in runs if r.data.tags.get("parathink.stage") == stage]
        assert len(stage_runs) == 1, f"{stage}: {len(stage_runs)} MLflow runs instead of one"
        history = client.get_metric_history(stage_runs[0].info.run_id, "loss")
        assert {m.step for m in history} == set(range(1, steps + 1))  # continuous: no step missing
        assert stage_runs[0].info.status == "FINISHED"
        manifest = json.loads((run / stage / MANIFEST).read_text())
        assert manifest["mlflow_run_id"] == stage_runs[0].info.run_id


# ------------------------------------------------------------------------------------------------------------
# The same with the real stages: base -> teacher -> filter -> sft -> rl_hard at tiny settings.

REAL = ["stages=[base,teacher,filter,sft,rl_hard]", "teacher.backend=scripted", "teacher.limit=48",
        "filter.gate.data_docs=false", "teacher.gate.data_docs=false",
        "base.gate.enabled=false", "sft.gate.enabled=false", "rl_hard.gate.enabled=false",  # 4 steps learn nothing
        "sft.max_steps=4", "sft.save_steps=1", "sft.global_batch=8", "sft.micro_batch=8", "sft.max_minutes=0",
        "rl_hard.init_from=sft", "rl_hard.steps=3", "rl_hard.prompts_per_step=2", "rl_hard.group_size=2",
        "rl_hard.token_budget=112", "rl_hard.checkpoint_every=1", "rl_hard.max_minutes=0"]


def start_real(tmp: Path, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "parathink.cli", "run", f"run_dir={tmp / 'run'}",
           f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}", *REAL, *extra]
    env = {**os.environ, "CI": "true", "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def kill_on(proc: subprocess.Popen, ready, what: str, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ready():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended before {what}:\n{proc.stdout.read().decode()[-4000:]}")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"{what} never happened")


def sft_checkpointed(run: Path, n: int):
    # trainer_state.json is the last file the Trainer writes into a checkpoint folder. A kill while it writes
    # the folder's other files leaves a checkpoint that transformers' get_last_checkpoint still picks and
    # cannot load (seen here; reported to the sft stage's owner), so this test kills after a complete one.
    return lambda: any(int(p.parent.name.split("-")[1]) >= n
                       for p in (run / ".work" / "sft" / "trainer").glob("checkpoint-*/trainer_state.json"))


def rl_checkpointed(run: Path, n: int):
    state = run / ".work" / "rl_hard" / "checkpoint" / "trainer_state.json"

    def ready():
        try:
            return json.loads(state.read_text())["step"] >= n
        except (OSError, ValueError, KeyError):
            return False
    return ready


@pytest.mark.slow
def test_sigkill_real_sft_and_rl_hard_then_resume(tmp_path):
    extra: list[str] = []  # the shipped tiny base (model.source=builtin:tiny_base)
    run = tmp_path / "run"
    sqlite_store(tmp_path / "mlflow.db")
    proc = start_real(tmp_path, extra)
    kill_on(proc, sft_checkpointed(run, 2), "sft checkpoint 2")
    assert not (run / "sft").exists() and (run / "filter" / MANIFEST).exists()
    done_before = {s: json.loads((run / s / MANIFEST).read_text())["finished_at"] for s in ("base", "teacher", "filter")}

    proc = start_real(tmp_path, extra)
    kill_on(proc, rl_checkpointed(run, 1), "rl_hard checkpoint 1")
    assert (run / "sft" / MANIFEST).exists() and not (run / "rl_hard").exists()
    assert_published_outputs_intact(run)

    proc = start_real(tmp_path, extra)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-4000:]
    assert_published_outputs_intact(run)
    for stage, finished in done_before.items():  # finished stages were not run again
        assert json.loads((run / stage / MANIFEST).read_text())["finished_at"] == finished
    sft = json.loads((run / "sft" / MANIFEST).read_text())
    assert sft["metrics"]["resumed_from_step"] >= 2  # the killed sft resumed from its checkpoint
    steps = [json.loads(line)["step"] for line in (run / "rl_hard" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("parathink-tiny").experiment_id])
    assert len([r for r in runs if "mlflow.parentRunId" not in r.data.tags]) == 1
    for stage, key in (("sft", "loss"), ("rl_hard", "reward_mean")):
        stage_runs = [r for r in runs if r.data.tags.get("parathink.stage") == stage]
        assert len(stage_runs) == 1, f"{stage}: {len(stage_runs)} MLflow runs instead of one"
        history = client.get_metric_history(stage_runs[0].info.run_id, key)
        logged = [m.step for m in history]
        assert logged.count(1) == 1, f"{stage}: step 1 logged {logged.count(1)} times: it started over"
        assert set(logged) >= set(range(1, max(logged) + 1))  # continuous: no step missing
    rl_logged = [m.step for m in client.get_metric_history(
        [r for r in runs if r.data.tags.get("parathink.stage") == "rl_hard"][0].info.run_id, "reward_mean")]
    assert set(rl_logged) == {1, 2, 3}

"""The component body: `parathink stage NAME` in a subprocess, retried on exit code 1 only; a final exit recorded as
the task's verdict, which a KFP retry of the task (a new pod, the same run id) exits with instead of running it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp_helpers import ROOT

from parathink.kfp import verdict
from parathink.kfp.components import STAGES, parathink_stage, stage_component

FLAKY = Path(__file__).parent / "stages" / "flaky.py"


RUN_ID = "3f1c8d2e-0000-4000-8000-000000000001"  # KFP's run uuid; a retry of a task has the same


def _run_flaky(tmp_path: Path, mode: str, failures: int = 0, retries: int = 2, run_id: str = RUN_ID):
    counter = tmp_path / "attempts"
    overrides = [f"+stage_modules.flaky={FLAKY}", f"+flaky.mode={mode}", f"+flaky.failures={failures}",
                 f"+flaky.counter={counter}", "tracking=none"]
    try:
        out = parathink_stage(stage="flaky", run_dir=str(tmp_path / "run"), overrides=overrides, trainjob=False,
                              retries=retries, retry_backoff_s=0, run_id=run_id)
        code = 0
    except SystemExit as exit_:
        out, code = None, exit_.code
    return out, code, int(counter.read_text()) if counter.exists() else 0


def test_exit_1_is_retried_until_it_succeeds(tmp_path, capfd):
    out, code, attempts = _run_flaky(tmp_path, "error", failures=1)
    assert (code, attempts, out) == (0, 2, str(tmp_path / "run"))
    assert (tmp_path / "run" / "flaky" / "done.txt").read_text() == "2"
    assert "stage flaky exited 1 (attempt 1 of 3); retrying" in capfd.readouterr().out


def test_exit_1_gives_up_after_the_profile_retries(tmp_path):
    _, code, attempts = _run_flaky(tmp_path, "error", failures=5, retries=1)
    assert (code, attempts) == (1, 2)


@pytest.mark.parametrize("mode, expected", [("bad_input", 2), ("gate", 3)])
def test_exit_2_and_3_are_never_retried(tmp_path, capfd, mode, expected):
    _, code, attempts = _run_flaky(tmp_path, mode, retries=2)
    assert (code, attempts) == (expected, 1)
    assert f"parathink-kfp: stage flaky exited {expected}" in capfd.readouterr().out


@pytest.mark.parametrize("mode, failures, expected", [("bad_input", 0, 2), ("gate", 0, 3), ("error", 5, 1)])
def test_a_kfp_retry_after_a_final_exit_ends_with_it_without_running_the_stage(tmp_path, capfd, mode, failures,
                                                                                 expected):
    """exit 2, 3, or 1 with the retries spent: KFP's retry of the task (a new pod) must not run the stage again."""
    _, code, attempts = _run_flaky(tmp_path, mode, failures=failures, retries=1)
    assert code == expected and verdict.recorded(str(tmp_path / "run"), RUN_ID, "flaky") == expected
    capfd.readouterr()
    _, code, attempts_after_retry = _run_flaky(tmp_path, mode, failures=failures, retries=1)
    assert (code, attempts_after_retry) == (expected, attempts)  # the stage did not start
    assert f"parathink-kfp: stage flaky exited {expected} earlier in this KFP run" in capfd.readouterr().out


def test_a_new_submission_of_the_run_directory_runs_the_stage_again(tmp_path):
    """The verdict is the run's: submitting the same run_dir again (the gate's cause fixed) is a new KFP run."""
    _, code, attempts = _run_flaky(tmp_path, "gate")
    _, code_again, attempts_again = _run_flaky(tmp_path, "gate", run_id="3f1c8d2e-0000-4000-8000-000000000002")
    assert (code, code_again, attempts, attempts_again) == (3, 3, 1, 2)


def test_a_lost_pods_retry_runs_the_stage(tmp_path):
    """A pod lost mid-stage (its process killed with it) records no verdict: KFP's retry runs the stage."""
    # the first attempt's pod: the stage is SIGKILLed (here the stage's own process, as the OOM killer does)
    counter = tmp_path / "attempts"
    killed = subprocess.run([sys.executable, "-c", KILLED_STAGE, str(tmp_path / "run"), str(counter)])
    assert killed.returncode == 128 + signal.SIGKILL and int(counter.read_text()) == 1
    assert verdict.recorded(str(tmp_path / "run"), RUN_ID, "flaky") is None
    out, code, attempts = _run_flaky(tmp_path, "error", failures=0)  # KFP's retry: a new pod, the same run
    assert (code, attempts, out) == (0, 2, str(tmp_path / "run"))


# The component's body in a pod whose stage is killed by a signal: the body reports 128 + 9 and records nothing.
KILLED_STAGE = f"""
import os, signal, subprocess, sys
from pathlib import Path
from parathink.kfp.components import parathink_stage
run_dir, counter = sys.argv[1], Path(sys.argv[2])
def killed(argv, **_):
    counter.write_text(str(int(counter.read_text()) + 1) if counter.exists() else "1")
    return -signal.SIGKILL
subprocess.call = killed
parathink_stage(stage="flaky", run_dir=run_dir, overrides=[], trainjob=False, retries=2, retry_backoff_s=0,
                run_id={RUN_ID!r})
"""


def test_verdicts_are_final_exits_only_and_unreadable_ones_run_the_stage(tmp_path):
    run_dir = str(tmp_path / "run")
    with pytest.raises(ValueError):
        verdict.record(run_dir, RUN_ID, "sft", 143)  # a stop from outside: KFP's retry may run it
    assert verdict.recorded(run_dir, RUN_ID, "sft") is None
    verdict.record(run_dir, RUN_ID, "sft", 2)
    assert verdict.verdict_uri(run_dir, RUN_ID, "sft") == f"{run_dir}/.kfp/verdicts/{RUN_ID}/sft.json"
    assert verdict.recorded(run_dir, RUN_ID, "sft") == 2 and verdict.recorded(run_dir, RUN_ID, "eval") is None
    Path(verdict.verdict_uri(run_dir, RUN_ID, "sft")).write_text("{not json")
    assert verdict.recorded(run_dir, RUN_ID, "sft") is None
    # an unresolved placeholder or a path is no run id: no verdict, the stage runs
    assert verdict.recorded(run_dir, "../x", "sft") is None and verdict.recorded(run_dir, "", "sft") is None


def test_one_component_per_stage_named_after_it():
    names = {stage: stage_component(stage).component_spec.name for stage in STAGES}
    assert names == {s: s.replace("_", "-") for s in STAGES}
    with pytest.raises(ValueError, match="no component for stage 'tiny'"):
        stage_component("tiny")


def test_metadata_lists_the_components_of_the_code():
    meta = yaml.safe_load((ROOT / "components" / "metadata.yaml").read_text())
    assert [c["name"] for c in meta["components"]] == list(STAGES)


def test_the_stage_process_gets_the_kfp_run_id(tmp_path, monkeypatch):
    """The run id that keys the verdict also reaches the stage as PARATHINK_KFP_RUN_ID (its MLflow run's kfp.run_id)."""
    seen = []
    monkeypatch.setattr(subprocess, "call", lambda argv, env=None: seen.append(env) or 0)
    parathink_stage(stage="flaky", run_dir=str(tmp_path / "run"), overrides=[], trainjob=False, retries=0,
                    retry_backoff_s=0, run_id=RUN_ID)
    assert [e["PARATHINK_KFP_RUN_ID"] for e in seen] == [RUN_ID] and seen[0]["PATH"] == os.environ["PATH"]

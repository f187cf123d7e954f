"""Every stage task is bounded: the cluster profile's timeout_s must end before the DAG's task ceiling
(PARATHINK_MAX_TIMEOUT_S, fixed at parse time), and a task stopped by that ceiling stops the stage it started
(its on_kill reaches the stage's process here, its pod under executor=kubernetes) and is not retried."""

import json
import os
import time
from pathlib import Path

import pytest
from dag_helpers import dag_test, states

RESUME_STAGE = Path(__file__).parents[1] / "stages" / "resume_stage.py"
CEILING_S = 45


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def runs(airflow_home, tmp_path_factory):
    work = tmp_path_factory.mktemp("dag-stop")
    calls = work / "calls.jsonl"
    hung = ["tracking=none", f"+stage_modules.base={RESUME_STAGE}", "+base.steps=1", f"+base.calls={calls}",
            f"+base.wait_for={work / 'never'}"]
    confs = [
        {"stages": ["base"], "run_dir": str(work / "hung"), "overrides": [*hung, "cluster.timeout_s.cpu=30"]},
        {"stages": ["base"], "run_dir": str(work / "over"), "overrides": [*hung, "cluster.timeout_s.cpu=3600"]},
    ]
    started = time.monotonic()
    results, log = dag_test(airflow_home, work, confs, PARATHINK_MAX_TIMEOUT_S=str(CEILING_S),
                            PARATHINK_FORM_ALLOW="stage_modules.base,cluster.timeout_s.*")
    return results, log, calls, time.monotonic() - started


@pytest.mark.slow
def test_a_hung_stage_is_stopped_at_the_ceiling_and_not_retried(runs):
    (hung, _), log, calls, _ = runs
    assert hung["tasks"]["base"] == {"state": "failed", "try_number": 1}, states(hung)
    (call,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert not _alive(call["pid"])  # the stage's process went with its task


@pytest.mark.slow
def test_a_profile_timeout_above_the_ceiling_fails_the_plan(runs):
    (_, over), log, _, _ = runs
    assert states(over)["plan"] == "failed" and states(over)["base"] == "upstream_failed"
    assert f"base: cluster timeout_s=3600 is not below this DAG's task timeout of {CEILING_S} s" in log

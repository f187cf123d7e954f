"""The DAGs' last task, `promote`, against a real MLflow server on 127.0.0.1: a candidate that wins moves the
registry's `champion`, one that loses leaves it where it was, and a run whose gate failed never gets there.

The curricula are the runner tests' plug-in stages (prep -> train -> tune -> eval, seconds each; ``make_curriculum``
and ``mlflow_server`` are in tests/conftest.py), run before the DAG; each DAG run then has eval (up to date, or
failing its gate) and promote.
"""

import json
from pathlib import Path

import pytest
from dag_helpers import dag_test, states
from mlflow.tracking import MlflowClient

from parathink.pipeline import runner

STAGES = ("prep", "train", "tune", "eval")
MODEL = "parathink-tiny"


def _curriculum(c, uri: str, name: str, *extra: str) -> dict:
    """Run the plug-in curriculum into run directory ``name``; return the DAG conf that promotes it."""
    c.run_dir = str(c.tmp / name)
    # The plug-in stages' models are stand-ins nothing can sample: promote compares their stored scores
    # (paired=false) instead of re-sampling the champion beside the candidate.
    overrides = c.overrides(f"tracking.uri={uri}", "tracking.promote.paired=false", *extra, stages=STAGES)
    assert runner.main_run(overrides) == 0
    mine = [o for o in overrides if not o.startswith(("run_dir=", "stages="))]  # the form's own fields
    return {"stages": ["eval"], "run_dir": c.run_dir, "promote": True, "overrides": mine}


@pytest.mark.slow
def test_promote_moves_champion_only_when_the_candidate_wins(mlflow_server, airflow_home, make_curriculum, tmp_path):
    c = make_curriculum(tracking="server")
    c.sections["eval"] = {"steps": 1, "results": "[train,tune]"}
    confs = [_curriculum(c, mlflow_server, "a"),  # tune scores 0.19; no champion yet
             _curriculum(c, mlflow_server, "b", "tune.steps=5"),  # 0.28: wins
             _curriculum(c, mlflow_server, "c")]  # 0.19 again: loses
    gate = _curriculum(c, mlflow_server, "d", "tune.steps=6")  # would win (0.34), but its eval gate fails
    confs.append({**gate, "overrides": [*gate["overrides"], "+eval.gate_at=1"]})

    # The plug-in stages and the test's own MLflow server are outside the form's allowlist: this test deployment
    # widens it, as an operator would (PARATHINK_FORM_ALLOW, docs/airflow.md).
    results, log = dag_test(airflow_home, tmp_path / "dag", confs,
                            PARATHINK_FORM_ALLOW="stage_modules.*,prep.*,train.*,tune.*,tracking.uri,tracking.promote.*")
    assert [r["state"] for r in results] == ["success", "success", "success", "failed"]
    assert {states(r)["promote"] for r in results[:3]} == {"success"}
    a, b, c_ = (_decision(tmp_path / name) for name in "abc")
    assert (a["promoted"], a["champion_before"], a["candidate"]["tags"]["eval.hard.accuracy"]) == (True, None, "0.19")
    assert (b["promoted"], b["champion_before"]["version"]) == (True, a["candidate"]["version"])
    assert (c_["promoted"], c_["champion_before"]["version"]) == (False, b["candidate"]["version"])
    assert "there is no champion yet" in log and "kept champion" in log
    assert "| hard.accuracy **(promotion metric)** | 0.28 | 0.19 |" in log  # the comparison table, in the task log
    # d: its gate failed at eval, so promote never ran although its model would have won.
    assert states(results[3])["eval"] == "failed" and states(results[3])["promote"] == "upstream_failed"
    client = MlflowClient(tracking_uri=mlflow_server)
    champion = client.get_model_version_by_alias(MODEL, "champion")
    assert (champion.version, champion.tags["eval.hard.accuracy"]) == (b["candidate"]["version"], "0.28")
    experiment = client.get_experiment_by_name(MODEL)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # MLflow's "Model training"


def _decision(run_dir: Path) -> dict:
    return json.loads((run_dir / "promote" / "promotion.json").read_text())

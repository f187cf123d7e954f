"""A stage's gate in MLflow: its verdict as metrics and a report artifact in the stage's run; a model that failed its
gate is kept but never registered, and becomes a registry candidate once a new threshold lets it through."""

from pathlib import Path

from mlflow.tracking import MlflowClient

from parathink.pipeline import runner

GATED = str(Path(__file__).parents[1] / "stages" / "gated_stage.py")


def overrides(c, min_value):
    return c.overrides(f"tracking.uri={c.uri}", f"stage_modules.train={GATED}", "+train.gate.enabled=true",
                       f"+train.gate.min_value={min_value}", "+train.gate.crash=false",
                       stages=("prep", "train", "tune"))


def _train_run(client):
    exp = client.get_experiment_by_name("parathink-tiny")
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("parathink.stage") == "train"][0]


def _versions(client):
    return sorted(v.tags["stage"] for v in client.search_model_versions("name='parathink-tiny'"))


def test_the_verdict_goes_to_the_stage_run_and_only_a_passing_model_is_registered(curriculum):
    client = MlflowClient(tracking_uri=curriculum.uri)
    assert runner.main_run(overrides(curriculum, 100)) == 3
    run = _train_run(client)
    assert run.info.status == "FAILED" and run.data.tags["parathink.gate"] == "failed"
    assert run.data.metrics["gate.passed"] == 0.0 and run.data.metrics["gate.value"] == 13.0
    assert {a.path for a in client.list_artifacts(run.info.run_id, "gates")} == {"gates/report.json", "gates/report.md"}
    assert "model" in {a.path for a in client.list_artifacts(run.info.run_id)}  # kept for inspection
    assert _versions(client) == []  # never a registry candidate

    assert runner.main_run(overrides(curriculum, 10)) == 0  # judged again in the same MLflow run, then tune
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["parathink.gate"] == "passed"
    assert run.data.metrics["gate.passed"] == 1.0
    assert _versions(client) == ["train", "tune"]
    assert curriculum.ran() == ["prep", "train", "tune"]

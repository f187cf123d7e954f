"""Runs that trace back and line up: lineage tags, run names, and stage-independent ``final.*`` metrics."""

import re
from datetime import UTC, datetime

from mlflow.tracking import MlflowClient

import parathink
from parathink.pipeline import runner
from parathink.tracking.curriculum import final_metrics
from parathink.tracking.lineage import git_state, lineage_tags, run_name, source_name

AIRFLOW = {"AIRFLOW_CTX_DAG_ID": "parathink_curriculum", "AIRFLOW_CTX_DAG_RUN_ID": "manual__2026-12-03T06:00:00",
           "AIRFLOW_CTX_TRY_NUMBER": "2"}


def test_tags_name_the_code_the_image_and_the_orchestrator_run():
    env = {**AIRFLOW, "PARATHINK_IMAGE": "localhost/parathink/trainer-cpu:0.1.0", "PARATHINK_IMAGE_DIGEST": "sha256:ab",
           "PARATHINK_KFP_RUN_ID": ""}
    tags = lineage_tags(env, run_dir="s3://b/runs/a", config_hash="c0ffee", git=("1234abcd", True))
    assert tags == {"parathink.version": parathink.__version__, "parathink.run_dir": "s3://b/runs/a",
                    "parathink.config_hash": "c0ffee", "mlflow.source.git.commit": "1234abcd",
                    "mlflow.source.name": "airflow:parathink_curriculum", "mlflow.source.type": "LOCAL",
                    "parathink.git_commit": "1234abcd", "parathink.git_dirty": "true",
                    "parathink.image": "localhost/parathink/trainer-cpu:0.1.0", "parathink.image_digest": "sha256:ab",
                    "airflow.dag_id": "parathink_curriculum", "airflow.run_id": "manual__2026-12-03T06:00:00",
                    "airflow.try_number": "2"}  # an empty variable is no tag


def test_an_image_without_a_checkout_reports_the_commit_it_was_built_from(tmp_path):
    assert git_state(tmp_path) == (None, None)  # not a git checkout
    tags = lineage_tags({"PARATHINK_GIT_COMMIT": "feed"}, run_dir="r", config_hash="h", git=git_state(tmp_path))
    assert tags["parathink.git_commit"] == "feed" and tags["parathink.git_dirty"] == "unknown"
    assert "parathink.git_commit" not in lineage_tags({}, run_dir="r", config_hash="h")


def test_the_source_column_names_what_started_the_run():
    assert source_name(AIRFLOW) == "airflow:parathink_curriculum"
    assert source_name({"PARATHINK_KFP_RUN_ID": "run-7"}) == "kfp:parathink"
    assert lineage_tags({}, run_dir="r", config_hash="h")["mlflow.source.name"] == "parathink"  # the command line


def test_run_names_tell_runs_apart():
    now = datetime(2026, 12, 3, 6, 5, tzinfo=UTC)
    a = run_name("tiny", seed=0, run_dir="/x/runs/a/r", environ={}, now=now)
    b = run_name("tiny", seed=0, run_dir="/x/runs/b/r", environ={}, now=now)
    assert a == "tiny 2026-12-03 06:05 seed 0 a/r" and b.endswith("b/r") and a != b  # same last folder, told apart
    assert run_name("tiny", seed=1, run_dir="s3://bucket/r", environ={}, now=now).endswith("seed 1 bucket/r")
    assert run_name("npr", seed=3, run_dir="r", environ=AIRFLOW, now=now).endswith("manual__2026-12-03T06:00:00")
    assert run_name("npr", seed=3, run_dir="r", environ={"PARATHINK_KFP_RUN_ID": "kfp-9"}, now=now).endswith("kfp-9")


def test_final_metrics_are_the_chosen_stage_under_stage_free_names():
    results = {"stages": {"sft": {"hard": {"accuracy": 0.2, "n": 1600}},
                          "rl_hard": {"hard": {"accuracy": 0.25, "relative_position": None, "generator": "engine"}}}}
    assert final_metrics(results, "rl_hard") == {"final.hard.accuracy": 0.25}
    assert final_metrics(results, None) == {}


def test_a_tracked_run_carries_its_lineage_on_parent_and_stages(make_curriculum, tmp_path, monkeypatch):
    """A real curriculum (the plug-in test stages) tracked in MLflow from inside an Airflow-like task context."""
    from servers import sqlite_store

    for k, v in AIRFLOW.items():
        monkeypatch.setenv(k, v)
    c = make_curriculum(tracking="sqlite")
    c.sections["eval"] = {"steps": 1, "results": "[train,tune]"}
    c.uri = sqlite_store(tmp_path / "mlflow.db")
    assert runner.main_run(c.overrides(f"tracking.uri={c.uri}", stages=("prep", "train", "tune", "eval"))) == 0
    client = MlflowClient(tracking_uri=c.uri)
    runs = client.search_runs([client.get_experiment_by_name("parathink-tiny").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    stages = {r.data.tags["parathink.stage"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert parent.info.run_name.startswith("tiny ") and parent.info.run_name.endswith(AIRFLOW["AIRFLOW_CTX_DAG_RUN_ID"])
    for run in [parent, *stages.values()]:
        tags = run.data.tags
        assert tags["airflow.dag_id"] == "parathink_curriculum" and tags["airflow.try_number"] == "2"
        assert tags["parathink.version"] == parathink.__version__ and tags["parathink.run_dir"] == str(c.run_dir)
        assert re.fullmatch("[0-9a-f]{40}", tags["mlflow.source.git.commit"])  # the checkout the tests run from
        assert tags["parathink.git_dirty"] in ("true", "false")
        assert len(tags["parathink.config_hash"]) == 16
    assert stages["train"].data.tags["parathink.config_hash"] != parent.data.tags["parathink.config_hash"]
    # the candidate (tune, the best on the promote metric) also under final.* on the parent
    assert parent.data.tags["parathink.final_stage"] == "tune"
    assert parent.data.metrics["final.hard.accuracy"] == parent.data.metrics["tune.hard.accuracy"] == 0.19


def test_an_image_pinned_by_tag_still_names_what_it_was_built_from():
    """images/build.sh bakes PARATHINK_BUILD_INPUTS into every image: a run from a tag-pinned image still carries it."""
    tags = lineage_tags({"PARATHINK_IMAGE": "reg/t:0.1.0", "PARATHINK_BUILD_INPUTS": "sha256:b1"}, run_dir="r",
                        config_hash="h")
    assert tags["parathink.build_inputs"] == "sha256:b1" and "parathink.image_digest" not in tags

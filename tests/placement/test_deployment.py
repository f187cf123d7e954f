"""A deployment's settings from its environment (parathink.config.deployment): the image, namespace, service account,
MLflow and data roots reach every stage pod without a fork of hydra_conf/cluster/, the command line still wins, and
`parathink plan` says where each came from. Stage pods mount no service-account token; the one pod that calls the
API (the KFP launcher of a multi-node stage) does."""

from __future__ import annotations

import json

import pytest

from parathink import cli
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose

IMAGE = "registry.example.com/ml/parathink-trainer@sha256:" + "ab" * 32
DEPLOYMENT = {"PARATHINK_IMAGE": IMAGE, "PARATHINK_NAMESPACE": "ml-research",
              "PARATHINK_SERVICE_ACCOUNT": "pt-stages", "PARATHINK_MLFLOW_URI": "https://mlflow.example.com",
              "PARATHINK_DATA_ROOTS": "s3://ml-data/parathink, s3://ml-data/evals",
              "PARATHINK_HF_TOKEN_SECRET": "hub-token:hf"}


def plan(capsys, monkeypatch, env: dict, *overrides: str) -> dict:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["plan", "experiment=parallel_r1_seen", *overrides]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_environment_reaches_every_gpu_pod_and_the_plan_says_from_where(capsys, monkeypatch):
    doc = plan(capsys, monkeypatch, DEPLOYMENT)
    gpu = [n for n, p in doc["placement"].items() if p["gpu"]]
    assert gpu and set(gpu) <= set(doc["pods"])
    for name in gpu:
        pod = doc["pods"][name]
        (container,) = pod["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert container["image"] == IMAGE and pod["metadata"]["namespace"] == "ml-research"
        assert pod["spec"]["serviceAccountName"] == "pt-stages"
        assert env["PARATHINK_IMAGE"]["value"] == IMAGE  # what tracking.lineage records for the stage's run
        assert env["PARATHINK_IMAGE_DIGEST"]["value"] == "sha256:" + "ab" * 32  # the pinned digest, on its own
        assert env["MLFLOW_TRACKING_URI"]["value"] == "https://mlflow.example.com"
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hub-token", "key": "hf"}}
    where = doc["deployment"]
    assert where["cluster.image"] == {"value": IMAGE, "from": "environment PARATHINK_IMAGE"}
    assert where["cluster.data_roots"]["value"] == ["s3://ml-data/parathink", "s3://ml-data/evals"]
    assert where["cluster.runs_root"]["from"] == "hydra_conf/cluster/gpu.yaml"
    assert where["cluster.env.HF_ENDPOINT"] == {"value": None, "from": "unset"}


def test_the_command_line_wins_over_the_environment(capsys, monkeypatch):
    doc = plan(capsys, monkeypatch, DEPLOYMENT, "cluster.namespace=staging")
    assert {p["metadata"]["namespace"] for p in doc["pods"].values()} == {"staging"}
    assert doc["deployment"]["cluster.namespace"] == {"value": "staging", "from": "command line"}
    assert doc["deployment"]["cluster.image"]["from"] == "environment PARATHINK_IMAGE"


def test_without_a_deployment_the_packaged_profile_holds(capsys, monkeypatch):
    for k in DEPLOYMENT:
        monkeypatch.delenv(k, raising=False)
    doc = plan(capsys, monkeypatch, {})
    assert {p["spec"]["containers"][0]["image"] for p in doc["pods"].values()} == {"ghcr.io/parathink/trainer:0.1.0"}
    assert all(v["from"] in ("hydra_conf/cluster/gpu.yaml", "unset") for v in doc["deployment"].values())


@pytest.mark.parametrize("env, words", [
    ({"PARATHINK_HF_TOKEN_SECRET": ":key"}, "PARATHINK_HF_TOKEN_SECRET=':key': expected a Secret NAME or NAME:KEY"),
    ({"PARATHINK_NAMESPACE": "a'b"}, "PARATHINK_NAMESPACE: a value with a quote"),
])
def test_a_bad_deployment_value_is_one_line_naming_the_variable(monkeypatch, env, words):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        compose(["experiment=parallel_r1_seen"])


def test_stage_pods_mount_no_token_and_the_trainjob_launcher_does(monkeypatch):
    from parathink.kfp.plan import make_plan, objects

    for k in DEPLOYMENT:
        monkeypatch.delenv(k, raising=False)
    plan_ = make_plan(["experiment=parallel_r1_seen", "+cluster.stage_overrides.sft.nodes=2"])
    for stage in plan_.stages:
        made = objects(plan_, stage)
        pod = made[0]
        if plan_.placements[stage].nodes > 1:  # its launcher creates and watches the TrainJob
            assert pod["spec"]["automountServiceAccountToken"] is True, stage
            assert "automountServiceAccountToken" not in json.dumps(made[1])  # the runtime's template decides
        else:
            assert pod["spec"]["automountServiceAccountToken"] is False, stage

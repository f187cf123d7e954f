"""Where KFP runs the pods: ``kubeflow`` (single-user) or a profile's namespace (multi-user), not necessarily the
cluster profile's, where the chart runs MLflow. The chart's Service URLs resolve from any namespace, and a
multi-node stage's TrainJob goes where its launcher's pod runs (docs/kubeflow.md, "Where KFP runs the pods")."""

from __future__ import annotations

import pytest
from kfp_helpers import SEEN, SFT_2_NODES, task_name

from parathink.kfp import launch
from parathink.kfp.launch import KubeAPI, main_trainjob
from parathink.kfp.plan import make_plan, objects, service_url

MLFLOW = "http://parathink-mlflow.parathink.svc:5000"  # gpu.yaml's http://parathink-mlflow:5000, namespace parathink


@pytest.mark.parametrize("given, expected", [
    ("http://parathink-mlflow:5000", MLFLOW),
    ("https://parathink-mlflow", "https://parathink-mlflow.parathink.svc"),
    ("http://user:pw@minio:9000/bucket?x=1", "http://user:pw@minio.parathink.svc:9000/bucket?x=1"),
    ("http://parathink-mlflow.other:5000", "http://parathink-mlflow.other:5000"),  # a namespace named: as it is
    ("http://mlflow.example.com", "http://mlflow.example.com"),
    ("http://localhost:5000", "http://localhost:5000"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("http://[::1]:5000", "http://[::1]:5000"),
    ("s3://bucket/runs", "s3://bucket/runs"),
    ("databricks", "databricks"),
    ("1", "1"),
])
def test_a_service_named_by_its_short_name_is_qualified_with_the_profiles_namespace(given, expected):
    assert service_url(given, "parathink") == expected


def test_every_task_reaches_mlflow_from_whatever_namespace_kfp_runs_it_in(compile_pipeline):
    compiled, plan = compile_pipeline(*SEEN), make_plan(SEEN)
    for stage in plan.stages:
        env = {e["name"]: e["value"] for e in compiled.container(task_name(stage))["env"]}
        assert env["MLFLOW_TRACKING_URI"] == MLFLOW, stage
    (pod,) = objects(plan, "sft")  # the Pod of the API-server tests says the same
    assert {"name": "MLFLOW_TRACKING_URI", "value": MLFLOW} in pod["spec"]["containers"][0]["env"]


def test_a_local_profiles_urls_are_left_alone():
    plan = make_plan(["experiment=tiny", "+cluster.env.MLFLOW_TRACKING_URI=http://127.0.0.1:5000"])
    assert {p.env["MLFLOW_TRACKING_URI"] for p in plan.placements.values()} == {"http://127.0.0.1:5000"}


class _TrainerAPI(KubeAPI):
    """An API server that stores nothing and reports every TrainJob Complete."""

    def __init__(self):
        self.created: list[dict] = []

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        if not dry_run:
            self.created.append(manifest)
        return manifest

    def get(self, manifest: dict) -> dict:
        return {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}


@pytest.mark.parametrize("namespace", ["kubeflow", "team-a"])
def test_the_trainjob_goes_to_the_namespace_of_the_launchers_pod(namespace):
    api = _TrainerAPI()
    assert main_trainjob("sft", SFT_2_NODES, api=api, poll_s=0, namespace=namespace) == 0
    (trainjob,) = api.created
    assert trainjob["metadata"]["namespace"] == namespace
    assert {"name": "MLFLOW_TRACKING_URI", "value": MLFLOW} in trainjob["spec"]["trainer"]["env"]


def test_without_a_pod_the_trainjob_goes_to_the_profiles_namespace():
    api = _TrainerAPI()
    assert main_trainjob("sft", SFT_2_NODES, api=api, poll_s=0) == 0
    assert api.created[0]["metadata"]["namespace"] == "parathink"


def test_the_launcher_reads_its_own_namespace_from_its_service_account(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "SERVICE_ACCOUNT_DIR", tmp_path)
    assert KubeAPI.own_namespace() is None
    (tmp_path / "namespace").write_text("kubeflow\n")
    assert KubeAPI.own_namespace() == "kubeflow"

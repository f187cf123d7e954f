"""The deployment tests' cluster: a real control plane on 127.0.0.1 (kube_control_plane), two fake kubelets
(a GPU node of the pool that hydra_conf/cluster/gpu.yaml names, and a CPU node of the default pool), and the
chart installed on it server-side. Started once per test session, stopped at its end."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kubernetes import client, config, dynamic
from omegaconf import OmegaConf

from fake_kubelet import FakeKubelet
from kube_control_plane import ControlPlane, ControlPlaneError, ensure_token_secret
from parathink_chart import GPU_PROFILE, NAMESPACE, installed, render

GPU_NODE, CPU_NODE = "gpu-node-0", "cpu-node-0"
ORCHESTRATOR_NS = "airflow"
# The Secrets named by the chart's values and by hydra_conf/cluster/gpu.yaml (test values, not credentials).
SECRETS = {"parathink-s3": {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
           "parathink-mlflow": {"MLFLOW_TRACKING_TOKEN": "test"},
           "parathink-postgres": {"username": "mlflow", "password": "test"}}


@dataclass
class Cluster:
    plane: ControlPlane
    api: client.ApiClient
    core: client.CoreV1Api
    kubelets: dict[str, FakeKubelet]


def taint_for(toleration: dict) -> dict:
    """The taint a pool's nodes carry for the toleration that admits its pods."""
    return {"key": toleration["key"], "value": toleration.get("value", "present"), "effect": toleration["effect"]}


def _kubelets(plane: ControlPlane, api: client.ApiClient) -> dict[str, FakeKubelet]:
    pool = OmegaConf.to_container(OmegaConf.load(GPU_PROFILE))
    gpu_capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", pool["gpu_resource"]: str(pool["gpus_per_node"])}
    return {
        GPU_NODE: FakeKubelet(api, GPU_NODE, pool["node_pool"]["node_selector"],
                              [taint_for(t) for t in pool["node_pool"]["tolerations"]], gpu_capacity,
                              plane.pki.issue("kubelet-gpu", GPU_NODE, server=True)),
        CPU_NODE: FakeKubelet(api, CPU_NODE, {}, [], {"cpu": "16", "memory": "64Gi", "pods": "110"},
                              plane.pki.issue("kubelet-cpu", CPU_NODE, server=True), runs_commands=True),
    }


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    try:
        plane = ControlPlane(tmp_path_factory.mktemp("kube")).start()
    except ControlPlaneError as e:
        pytest.fail(str(e))
    kubelets = {}
    try:
        api = config.new_client_from_config(str(plane.admin_kubeconfig))
        kubelets = {name: k.start() for name, k in _kubelets(plane, api).items()}
        yield Cluster(plane, api, client.CoreV1Api(api), kubelets)
    finally:
        for k in kubelets.values():
            k.stop()
        plane.stop()


def apply(api: client.ApiClient, objects: list[dict], manager: str = "helm") -> None:
    """Server-side apply, as `helm install` (Helm 4) and `kubectl apply --server-side` do."""
    dyn = dynamic.DynamicClient(api)
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.server_side_apply(body=obj, name=obj["metadata"]["name"],
                                   namespace=obj["metadata"].get("namespace"), field_manager=manager)


@pytest.fixture(scope="session")
def chart_installed(cluster) -> list[dict]:
    """The chart with its default values (the pool of gpu.yaml) installed in its namespace; returns its objects."""
    for ns in (NAMESPACE, ORCHESTRATOR_NS):
        cluster.core.create_namespace({"metadata": {"name": ns}})
    for name, data in SECRETS.items():  # what docs/deploy.md has the platform team create before the install
        cluster.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": name}, "stringData": data})
    objects = installed(render())
    apply(cluster.api, objects)
    for sa in [o for o in objects if o["kind"] == "ServiceAccount"]:
        ensure_token_secret(cluster.core, NAMESPACE, sa["metadata"]["name"])
    return objects

"""The deployment tests' cluster: the real control plane (kube_control_plane), two fake kubelets (a GPU node of the
pool that hydra_conf/cluster/gpu.yaml names, and a CPU node of the default pool), and the objects that the chart
installs. conftest.py starts it once per test session and stops it at the end.

Not in conftest.py itself: test modules import these names, and ``conftest`` may name another folder's module
when several test folders are collected together."""

from __future__ import annotations

from dataclasses import dataclass

from fake_kubelet import FakeKubelet
from kube_control_plane import ControlPlane
from kubernetes import client, dynamic
from omegaconf import OmegaConf
from parathink_chart import GPU_PROFILE

GPU_NODE, CPU_NODE = "gpu-node-0", "cpu-node-0"
# A node of 2 fake GPUs that runs its pods' `parathink` commands on this machine (the ranks on its CPU, joined over
# gloo): a stage placed on 2 GPUs shows its 2 ranks join (test_ranks_on_cluster.py). Its own label and taint keep
# every other test's pods off it.
TWO_GPU_NODE = "gpu2-node-0"
TWO_GPU_LABEL = {"parathink.io/pool": "gpu-2"}
TWO_GPU_TAINT = {"key": "parathink.io/fake-gpus", "value": "2", "effect": "NoSchedule"}
ORCHESTRATOR_NS = "airflow"
# The Secrets named by the chart's values and by hydra_conf/cluster/gpu.yaml (test values, not credentials).
SECRETS = {"parathink-s3": {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
           "parathink-mlflow": {"username": "parathink", "password": "test"},
           "parathink-mlflow-promote": {"username": "parathink-promote", "password": "test"},
           "parathink-mlflow-admin": {"username": "admin", "password": "test"},
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


def make_kubelets(plane: ControlPlane, api: client.ApiClient) -> dict[str, FakeKubelet]:
    pool = OmegaConf.to_container(OmegaConf.load(GPU_PROFILE))
    gpu_capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", pool["gpu_resource"]: str(pool["gpus_per_node"])}
    return {
        GPU_NODE: FakeKubelet(api, GPU_NODE, pool["node_pool"]["node_selector"],
                              [taint_for(t) for t in pool["node_pool"]["tolerations"]], gpu_capacity,
                              plane.pki.issue("kubelet-gpu", GPU_NODE, server=True)),
        CPU_NODE: FakeKubelet(api, CPU_NODE, {}, [], {"cpu": "16", "memory": "64Gi", "pods": "110"},
                              plane.pki.issue("kubelet-cpu", CPU_NODE, server=True), runs_commands=True),
        TWO_GPU_NODE: FakeKubelet(api, TWO_GPU_NODE, TWO_GPU_LABEL, [TWO_GPU_TAINT],
                                  {"cpu": "16", "memory": "64Gi", "pods": "110", pool["gpu_resource"]: "2"},
                                  plane.pki.issue("kubelet-gpu2", TWO_GPU_NODE, server=True), runs_commands=True),
    }


def apply(api: client.ApiClient, objects: list[dict], manager: str = "helm") -> None:
    """Server-side apply, as `helm install` (Helm 4) and `kubectl apply --server-side` do."""
    dyn = dynamic.DynamicClient(api)
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.server_side_apply(body=obj, name=obj["metadata"]["name"],
                                   namespace=obj["metadata"].get("namespace"), field_manager=manager)

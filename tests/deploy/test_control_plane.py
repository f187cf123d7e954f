"""The chart and the pipelines' pods against a real control plane (kube-apiserver + kube-scheduler 1.20 on
127.0.0.1, conftest.py): the chart installs server-side, its RBAC gives each identity what it needs and nothing
more, and the real scheduler places the pods that the Kubeflow pipeline creates on the right pool, or leaves them
Pending for the reason a platform engineer would look for."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from kube_cluster import GPU_NODE, ORCHESTRATOR_NS, apply
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from parathink_chart import NAMESPACE, hooks, render

from parathink.kfp.plan import stage_objects

GPU_EXPERIMENT = ["experiment=parallel_r1_seen"]
WAIT_S = 60  # a bound on waiting for the scheduler, never a figure under test


def wait_for(read, done, what: str):
    deadline, last = time.monotonic() + WAIT_S, None
    while time.monotonic() < deadline:
        last = read()
        if done(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached in {WAIT_S} s; last state: {last}")


def create_pod(cluster, manifest: dict, name: str) -> client.V1Pod:
    manifest = {**manifest, "metadata": {**manifest["metadata"], "name": name}}
    return cluster.core.create_namespaced_pod(NAMESPACE, manifest)


def read_pod(cluster, name: str) -> client.V1Pod:
    return cluster.core.read_namespaced_pod(name, NAMESPACE)


def unschedulable_message(pod: client.V1Pod) -> str | None:
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return c.message
    return None


def gpu_pod(experiment: list[str] = GPU_EXPERIMENT) -> dict:
    (pod,) = stage_objects(experiment, "sft")
    return pod


def test_everything_listens_on_loopback_only(cluster):
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    ours = {*cluster.plane.pids().values(), os.getpid()}  # the fake kubelets serve from this process
    listening = [(m.group(1), int(m.group(2))) for line in out.splitlines()
                 if (m := re.search(r"\s(\S+):\d+\s+\S+\s+users:.*pid=(\d+),", line)) and int(m.group(2)) in ours]
    # etcd (client, peer), the API server, the scheduler and two kubelets' log endpoints
    assert len(listening) >= 6, out
    assert {addr for addr, _ in listening} == {"127.0.0.1"}, listening


def test_chart_installs_server_side(cluster, chart_installed):
    kinds = sorted(o["kind"] for o in chart_installed)
    # six NetworkPolicies: the default values have KFP's tasks in the namespace (rbac.kfpTasks), so its control
    # plane's egress renders too
    assert kinds == ["Deployment", *["NetworkPolicy"] * 6, "Role", "Role", "RoleBinding", "RoleBinding",
                     "Service", "ServiceAccount", "ServiceAccount"]
    policies = {o["metadata"]["name"] for o in chart_installed if o["kind"] == "NetworkPolicy"}
    assert "parathink-kfp" in policies, policies
    deployment = client.AppsV1Api(cluster.api).read_namespaced_deployment("parathink-mlflow", NAMESPACE)
    assert deployment.spec.template.spec.security_context.run_as_non_root is True
    service = cluster.core.read_namespaced_service("parathink-mlflow", NAMESPACE)
    assert service.spec.cluster_ip.startswith("10.96.0.")  # allocated by the API server from its range


def can(cluster, user: str, verb: str, resource: str, namespace: str = NAMESPACE, group: str = "",
        subresource: str = "", name: str = "") -> bool:
    review = {"spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                       "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                              "resource": resource, "subresource": subresource, "name": name}}}
    return client.AuthorizationV1Api(cluster.api).create_subject_access_review(review).status.allowed


AIRFLOW_WORKER = f"system:serviceaccount:{ORCHESTRATOR_NS}:airflow-worker"
RUNNER = f"system:serviceaccount:{NAMESPACE}:parathink-runner"


@pytest.mark.parametrize("user, verb, resource, group, subresource, namespace, allowed", [
    (AIRFLOW_WORKER, "create", "pods", "", "", NAMESPACE, True),
    (AIRFLOW_WORKER, "watch", "pods", "", "", NAMESPACE, True),
    (AIRFLOW_WORKER, "get", "pods", "", "log", NAMESPACE, True),
    (AIRFLOW_WORKER, "delete", "pods", "", "", NAMESPACE, True),
    (AIRFLOW_WORKER, "create", "trainjobs", "trainer.kubeflow.org", "", NAMESPACE, True),
    (AIRFLOW_WORKER, "create", "pods", "", "exec", NAMESPACE, False),
    (AIRFLOW_WORKER, "get", "secrets", "", "", NAMESPACE, False),
    (AIRFLOW_WORKER, "create", "pods", "", "", "default", False),
    (AIRFLOW_WORKER, "create", "rolebindings", "rbac.authorization.k8s.io", "", NAMESPACE, False),
    (RUNNER, "create", "trainjobs", "trainer.kubeflow.org", "", NAMESPACE, True),
    (RUNNER, "delete", "trainjobs", "trainer.kubeflow.org", "", NAMESPACE, True),
    (RUNNER, "create", "workflowtaskresults", "argoproj.io", "", NAMESPACE, True),
    (RUNNER, "get", "pods", "", "", NAMESPACE, True),
    (RUNNER, "create", "pods", "", "", NAMESPACE, False),
    (RUNNER, "get", "pods", "", "log", NAMESPACE, False),
    (RUNNER, "list", "secrets", "", "", NAMESPACE, False),
    (RUNNER, "create", "trainjobs", "trainer.kubeflow.org", "", "default", False),
])
def test_rbac_is_least_privilege(cluster, chart_installed, user, verb, resource, group, subresource, namespace,
                                 allowed):
    assert can(cluster, user, verb, resource, namespace, group, subresource) is allowed


@pytest.mark.parametrize("verb, resource, name, allowed", [
    ("get", "configmaps", "kfp-launcher", True),  # KFP's launcher: pipeline root, object-store provider
    ("get", "configmaps", "metadata-grpc-configmap", True),
    ("get", "secrets", "mlpipeline-minio-artifact", True),  # the artifact store's credentials, by name
    ("get", "configmaps", "other", False),
    ("list", "configmaps", "", False),
    ("get", "secrets", "parathink-s3", False),
    ("list", "secrets", "", False),
])
def test_the_runner_reads_what_kfps_launcher_reads_by_name_only(cluster, chart_installed, verb, resource, name,
                                                                allowed):
    assert can(cluster, RUNNER, verb, resource, name=name) is allowed


def test_gpu_stage_is_bound_to_the_gpu_node(cluster, chart_installed):
    create_pod(cluster, gpu_pod(), "sft-gpu")
    pod = wait_for(lambda: read_pod(cluster, "sft-gpu"), lambda p: p.status.phase == "Succeeded", "sft pod done")
    assert pod.spec.node_name == GPU_NODE
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"


def test_gpu_pod_without_the_toleration_stays_pending_on_the_taint(cluster, chart_installed):
    pod = gpu_pod()
    del pod["spec"]["tolerations"]
    create_pod(cluster, pod, "sft-no-toleration")
    pod = wait_for(lambda: read_pod(cluster, "sft-no-toleration"), unschedulable_message, "unschedulable")
    message = unschedulable_message(pod)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    assert "taint {nvidia.com/gpu: present}" in message and "didn't tolerate" in message, message


def test_pod_asking_for_more_gpus_than_a_node_has_stays_pending(cluster, chart_installed):
    pod = gpu_pod(GPU_EXPERIMENT + ["cluster.gpus_per_node=9"])
    create_pod(cluster, pod, "sft-nine-gpus")
    pod = wait_for(lambda: read_pod(cluster, "sft-nine-gpus"), unschedulable_message, "unschedulable")
    assert pod.spec.node_name is None
    assert "Insufficient nvidia.com/gpu" in unschedulable_message(pod)


def test_chart_gpu_pool_test_pod_runs_on_the_pool(cluster, chart_installed):
    (pod,) = hooks(render())
    apply(cluster.api, [pod])
    name = pod["metadata"]["name"]
    pod = wait_for(lambda: read_pod(cluster, name), lambda p: p.status.phase == "Succeeded", "helm test pod done")
    assert pod.spec.node_name == GPU_NODE


TRAINJOB_CRD = {
    # A stand-in for Kubeflow Trainer's CRD (not installed here): the group, kind and scope are the real ones, the
    # schema checks the fields parathink sets and keeps the rest.
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
    "spec": {"group": "trainer.kubeflow.org", "scope": "Namespaced",
             "names": {"kind": "TrainJob", "plural": "trainjobs", "singular": "trainjob", "listKind": "TrainJobList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["runtimeRef"],
                                        "x-kubernetes-preserve-unknown-fields": True, "properties": {
                                   "runtimeRef": {"type": "object", "required": ["name"], "properties": {
                                       "name": {"type": "string"}, "apiGroup": {"type": "string"},
                                       "kind": {"type": "string"}}},
                                   "trainer": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                               "properties": {"numNodes": {"type": "integer", "minimum": 1},
                                                              "image": {"type": "string"},
                                                              "command": {"type": "array",
                                                                          "items": {"type": "string"}}}}}},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def test_runner_creates_a_multi_node_trainjob_and_nothing_else(cluster, chart_installed):
    ext = client.ApiextensionsV1Api(cluster.api)
    ext.create_custom_resource_definition(TRAINJOB_CRD)
    wait_for(lambda: ext.read_custom_resource_definition("trainjobs.trainer.kubeflow.org").status.conditions or [],
             lambda cs: any(c.type == "Established" and c.status == "True" for c in cs), "CRD established")
    launcher_pod, trainjob = stage_objects(GPU_EXPERIMENT + ["cluster.nodes=2"], "sft")
    runner = config.new_client_from_config(str(cluster.plane.service_account_kubeconfig(NAMESPACE, "parathink-runner")))
    created = client.CustomObjectsApi(runner).create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", NAMESPACE, "trainjobs", trainjob)
    assert created["spec"]["trainer"]["numNodes"] == 2
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(runner).create_namespaced_pod(NAMESPACE, launcher_pod)
    assert denied.value.status == 403

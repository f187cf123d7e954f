"""A curriculum stage as a pod of the trainer image on the real local cluster (conftest.py: kubelet + containerd +
the control plane, the chart installed): the pod is the one parathink.placement.podspec renders from the cluster profile
(as the DAG's KubernetesPodOperator and KFP use it), its run directory is on the in-cluster S3, it tracks to the
in-cluster MLflow through the Service's DNS name. What is checked is what only a real node can show: the container
ran in containerd from the image `make images` built (its config digest is podman's image ID), the kubelet enforced
the requests/limits rendered (the container's cgroup, read on the host while it runs), and the stage wrote its
results to S3. Stand-ins here: the node's GPU capacity is fake (the GPU pool's pods run CPU containers), Postgres and
S3 are local images (images/offline), the cluster DNS is cluster_dns.py."""

from __future__ import annotations

import base64
import glob
import json
import subprocess
import time
import urllib.request
import uuid

import pytest
from built_images import PREFIX, version
from kubernetes import client
from local_cluster import CLUSTER_DIR, Paths, ctr
from local_install import MLFLOW_USER, NAMESPACE, S3_BUCKET, service_url

from parathink.pipeline.compose import compose
from parathink.placement import cluster, podspec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
STAGE_TIMEOUT_S = 600  # a bound on the wait, never a figure under test
CPU, MEMORY = "1", "3Gi"


def profile(**extra: str) -> list[str]:
    """The GPU profile (hydra_conf/cluster/gpu.yaml) pointed at this cluster: the CPU trainer image, never pulled,
    pods sized for a 2-CPU node, the in-cluster S3 as run directories' store, no scratch volume (this cluster has no
    dynamic volume provisioner: a pod with a generic ephemeral volume would stay Pending)."""
    return ["cluster=gpu", f"cluster.image={PREFIX}/trainer-cpu:{version()}", "cluster.image_pull_policy=Never",
            "cluster.scratch=null",
            f"cluster.resources.cpu={{cpu: '{CPU}', memory: {MEMORY}}}",
            f"cluster.resources.gpu={{cpu: '{CPU}', memory: {MEMORY}}}", "cluster.shm_size=256Mi",
            f"cluster.runs_root=s3://{S3_BUCKET}/runs",
            "+cluster.env.AWS_ENDPOINT_URL=http://parathink-s3:5000",
            "+cluster.env.MLFLOW_S3_ENDPOINT_URL=http://parathink-s3:5000",
            "+cluster.env.OMP_NUM_THREADS='1'",
            *[f"{k}={v}" for k, v in extra.items()]]


def stage_pod(stage: str, run_dir: str, *overrides: str) -> dict:
    cfg = compose(["experiment=tiny", *profile()])
    p = cluster.placement(cfg, stage)
    command = ["parathink", "stage", stage, f"run_dir={run_dir}", "experiment=tiny", "tracking=server", *overrides]
    return podspec.pod(p, command, name=f"e2e-{podspec.k8s_name(stage)}-{uuid.uuid4().hex[:6]}")


def mlflow_api(api, path: str, body: dict | None = None) -> dict:
    """MLflow's REST API through its Service, from the host (kube-proxy's rules), as the chart's basic-auth user;
    the Host header is the Service's name (MLflow answers only the hosts the chart allows)."""
    url = service_url(api, "parathink-mlflow", 5000) + path
    token = base64.b64encode(f"{MLFLOW_USER['username']}:{MLFLOW_USER['password']}".encode()).decode()
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Host": "parathink-mlflow:5000", "Authorization": f"Basic {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def cgroup_limits(pod_uid: str, container_id: str) -> dict | None:
    """The container's memory limit and CPU quota as the kubelet set them (cgroup v1, cgroupfs driver)."""
    found = glob.glob(f"/sys/fs/cgroup/memory/kubepods*/**/pod{pod_uid}/{container_id}", recursive=True)
    cpu = glob.glob(f"/sys/fs/cgroup/cpu/kubepods*/**/pod{pod_uid}/{container_id}", recursive=True)
    if not found or not cpu:
        return None
    try:
        return {"memory": int(open(f"{found[0]}/memory.limit_in_bytes").read()),
                "cfs_quota_us": int(open(f"{cpu[0]}/cpu.cfs_quota_us").read()),
                "cfs_period_us": int(open(f"{cpu[0]}/cpu.cfs_period_us").read())}
    except OSError:  # the container ended between the glob and the read
        return None


def run_pod(core: client.CoreV1Api, manifest: dict) -> tuple[client.V1Pod, dict | None, float, str]:
    """Create the pod, read its container's cgroup while it runs, wait for the end, delete it:
    (pod, limits, seconds, log)."""
    core.create_namespaced_pod(NAMESPACE, manifest)
    name, limits, t0 = manifest["metadata"]["name"], None, time.monotonic()
    while time.monotonic() - t0 < STAGE_TIMEOUT_S:
        pod = core.read_namespaced_pod(name, NAMESPACE)
        status = (pod.status.container_statuses or [None])[0]
        if limits is None and status and status.container_id and status.state.running:
            limits = cgroup_limits(pod.metadata.uid, status.container_id.split("://", 1)[1])
        if pod.status.phase in ("Succeeded", "Failed"):
            seconds, log = time.monotonic() - t0, core.read_namespaced_pod_log(name, NAMESPACE)
            core.delete_namespaced_pod(name, NAMESPACE)
            return pod, limits, seconds, log
        time.sleep(0.3 if limits is None else 2)
    raise AssertionError(f"pod {name} not finished after {STAGE_TIMEOUT_S} s: {pod.status}")


def podman_image_id(ref: str) -> str:
    return "sha256:" + subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref],
                                      capture_output=True, text=True, check=True).stdout.strip()


def config_digest(image_ref: str) -> str:
    """The config digest of what the pod's imageID names in containerd: a manifest (a repo digest, NAME@sha256:...)
    names its config; an image ID is the config's digest (read from containerd's content store either way)."""
    digest = image_ref.rsplit("@", 1)[-1]
    blob = json.loads(ctr(Paths(CLUSTER_DIR), "content", "get", digest).stdout)
    return blob["config"]["digest"] if "layers" in blob else digest


def test_base_stage_runs_as_a_pod_of_the_built_image_with_its_limits_enforced(api):
    core = client.CoreV1Api(api)
    run_dir = f"s3://{S3_BUCKET}/runs/e2e-{uuid.uuid4().hex[:8]}"
    manifest = stage_pod("base", run_dir)
    pod, limits, seconds, log = run_pod(core, manifest)
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Succeeded", f"{status.state}\n{log[-3000:]}"
    print(f"base pod: {seconds:.0f} s from create to Succeeded")
    # The container ran in containerd, from the image podman built.
    assert status.container_id.startswith("containerd://")
    ref = f"{PREFIX}/trainer-cpu:{version()}"
    assert status.image == ref or status.image.endswith(ref.split("/", 1)[1])
    assert config_digest(status.image_id) == podman_image_id(ref)
    # The kubelet enforced what the podspec rendered (requests = limits: Guaranteed QoS).
    rendered = manifest["spec"]["containers"][0]["resources"]["limits"]
    # (gpu.yaml places `base` on the GPU pool: its fake GPUs are in the limits too, and no cgroup enforces them.)
    assert {k: rendered[k] for k in ("cpu", "memory")} == {"cpu": CPU, "memory": MEMORY}
    assert pod.status.qos_class == "Guaranteed"
    assert limits == {"memory": 3 * 2**30, "cfs_quota_us": 100_000, "cfs_period_us": 100_000}, limits
    # The stage's results are on the in-cluster S3.
    import boto3
    s3 = boto3.client("s3", endpoint_url=service_url(api, "parathink-s3", 5000), region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=run_dir.split("/", 3)[3]).get("Contents", [])]
    assert any(k.endswith("base/_manifest.json") for k in keys), keys
    # The stage tracked to the in-cluster MLflow (through the Service's DNS name, as its user).
    experiment = mlflow_api(api, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=parathink-tiny")
    search = {"experiment_ids": [experiment["experiment"]["experiment_id"]], "max_results": 50}
    runs = mlflow_api(api, "/api/2.0/mlflow/runs/search", search).get("runs", [])
    tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
    parents = {r["info"]["run_id"] for r, tag in zip(runs, tags) if tag.get("parathink.run_dir") == run_dir}
    stage = [(r, tag) for r, tag in zip(runs, tags) if tag.get("mlflow.parentRunId") in parents]
    assert parents and stage, tags[:3]
    (run, tag), = stage
    metrics = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
    assert tag.get("parathink.gate") == "passed" and "peak_rss_mb" in metrics, (tag, metrics)
    print(f"MLflow: the stage's run under the run's parent, metrics {sorted(metrics)}")


def test_mlflow_answers_through_its_service_from_a_pod(api):
    """The chart's MLflow, Ready, reached by its Service's DNS name from a pod of the namespace (cluster_dns.py
    resolves the name, kube-proxy routes the ClusterIP)."""
    core = client.CoreV1Api(api)
    probe = ("import urllib.request; r = urllib.request.urlopen('http://parathink-mlflow:5000/health', timeout=10); "
             "print(r.status, r.read().decode())")
    name = f"e2e-mlflow-probe-{uuid.uuid4().hex[:6]}"
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                         "containers": [{"name": "probe", "image": f"{PREFIX}/trainer-cpu:{version()}",
                                         "imagePullPolicy": "Never", "command": ["python3", "-c", probe]}]}}
    pod, _, _, log = run_pod(core, manifest)
    assert pod.status.phase == "Succeeded" and log.strip() == "200 OK", log


def test_gpu_pool_placement_is_scheduled_on_the_fake_gpu_capacity(api):
    """The node advertises the pool's label and 8 fake nvidia.com/gpu: the teacher's pod (8 GPUs, the pool's
    selector) is bound; the same pod asking for 9 stays Pending with the scheduler's reason."""
    core = client.CoreV1Api(api)
    fits = stage_pod("teacher", "s3://unused/run")
    limits = fits["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and fits["spec"]["nodeSelector"] == {"parathink.io/pool": "gpu"}
    fits["spec"]["containers"][0]["command"] = ["parathink", "--help"]
    pod, _, _, _ = run_pod(core, fits)
    assert pod.status.phase == "Succeeded" and pod.spec.node_name == "parathink-node"
    too_many = stage_pod("teacher", "s3://unused/run")
    for part in ("limits", "requests"):
        too_many["spec"]["containers"][0]["resources"][part]["nvidia.com/gpu"] = "9"
    core.create_namespaced_pod(NAMESPACE, too_many)
    name, deadline, reason = too_many["metadata"]["name"], time.monotonic() + 60, None
    try:
        while time.monotonic() < deadline and not reason:
            events = core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={name}").items
            reason = next((e.message for e in events if e.reason == "FailedScheduling"), None)
            time.sleep(0.5)
        assert reason and "Insufficient nvidia.com/gpu" in reason, reason
        assert core.read_namespaced_pod(name, NAMESPACE).status.phase == "Pending"
    finally:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

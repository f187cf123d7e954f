"""A stage's placement as a Kubernetes Pod: the one rendering every orchestrator consumes.

:func:`pod` turns a :class:`placement.cluster.Placement` into the Pod manifest (the Kubernetes API's JSON, plain
dicts): the container (image, pull policy, resources, env, env from Secrets, mounts), the GPU pool's node selector
and tolerations, the volumes, the labels and the security context. The consumers translate it, they do not decide:

- Airflow (``executor=kubernetes``): ``parathink plan`` prints it per stage (``pods``); the DAG hands it to the
  ``KubernetesPodOperator`` as its pod template (``dags/parathink_airflow/pods.py``), so the DAG folder imports
  nothing of parathink;
- Kubeflow Pipelines: :func:`parathink.kfp.tasks.place` turns it into kfp-kubernetes calls, refusing a field it
  cannot express instead of dropping it;
- Kubeflow Trainer: :func:`parathink.kfp.manifests.trainjob_manifest` patches the runtime's pod with its spec.

Every pod and container passes the Pod Security Standard "restricted" (a namespace enforcing it admits them): not
root (``runAsNonRoot``, with the profile's ``run_as_user``, the image's own uid), no privilege escalation, every
capability dropped, the runtime's default seccomp profile, and only emptyDir and PVC volumes.
"""

from __future__ import annotations

import re
from typing import Any

from parathink.placement.cluster import Placement

SHM_VOLUME, RUNS_VOLUME, SCRATCH_VOLUME = "dshm", "runs", "scratch"
CONTAINER = "main"  # KFP's name for a task's container; Airflow watches the container by the name it finds here
STAGE_LABEL = "parathink.io/stage"
HUB_LABEL = "parathink.io/hub"
# The restricted profile (kubernetes.io/docs/concepts/security/pod-security-standards): what each container says.
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                      "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def k8s_name(text: str) -> str:
    """``my_stage`` -> ``my-stage``: stage names as DNS labels (Pod and TrainJob names allow no underscore)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def labels(p: Placement) -> dict[str, str]:
    """The one label set of a stage's pods (Airflow, KFP and TrainJob alike): NetworkPolicies select on it."""
    out = {"app.kubernetes.io/name": "parathink", "app.kubernetes.io/component": "stage",
           STAGE_LABEL: k8s_name(p.stage)}
    if p.hub:  # the chart's NetworkPolicy lets only these pods reach the model hub
        out[HUB_LABEL] = "true"
    return out


def env(p: Placement) -> list[dict[str, Any]]:
    """Plain variables, then variables from Secrets (only the Secret's name and key appear, never a value)."""
    plain = [{"name": k, "value": v} for k, v in p.env.items()]
    from_secrets = [{"name": s.env, "valueFrom": {"secretKeyRef": {
        "name": s.secret, "key": s.key, **({"optional": True} if s.optional else {})}}} for s in p.secrets]
    return plain + from_secrets


def volumes(p: Placement) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): a memory-backed /dev/shm of ``shm_size`` (NCCL, DataLoader workers), the runs PVC, if any,
    and the scratch volume, if any: a generic ephemeral volume, a PVC of ``size`` that Kubernetes creates with the
    pod and deletes with it, so that a stage's downloads (tens of GB of weights) neither fill the node's disk nor
    get the pod evicted for it."""
    vols = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": p.shm_size}}]
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    if p.volume:
        vols.append({"name": RUNS_VOLUME, "persistentVolumeClaim": {"claimName": p.volume["claim"]}})
        mounts.append({"name": RUNS_VOLUME, "mountPath": p.volume["mount_path"]})
    if p.scratch:
        claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": p.scratch["size"]}}}
        if p.scratch["storage_class"]:
            claim["storageClassName"] = p.scratch["storage_class"]
        vols.append({"name": SCRATCH_VOLUME, "ephemeral": {"volumeClaimTemplate": {"spec": claim}}})
        mounts.append({"name": SCRATCH_VOLUME, "mountPath": p.scratch["mount_path"]})
    return vols, mounts


def resources(p: Placement) -> dict[str, dict[str, str]]:
    """Requests equal to limits (Guaranteed QoS: a training pod is the last evicted), the GPUs on the GPU pool."""
    amounts = dict(p.resources)
    if p.gpu:
        amounts[p.gpu_resource] = str(p.gpus_per_node)
    return {"requests": amounts, "limits": dict(amounts)}


def pod_security(p: Placement) -> dict[str, Any]:
    """The pod's securityContext: the image's non-root uid (and group, and the PVC's group) and RuntimeDefault."""
    uid = p.run_as_user
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container(p: Placement, command: list[str] | None = None, name: str = CONTAINER) -> dict[str, Any]:
    """The stage's container; ``command`` None leaves it to the orchestrator (Airflow sets it per task)."""
    _, mounts = volumes(p)
    out: dict[str, Any] = {"name": name, "image": p.image, "imagePullPolicy": p.image_pull_policy}
    if command is not None:
        out["command"] = list(command)
    out.update(env=env(p), resources=resources(p), volumeMounts=mounts, securityContext=dict(CONTAINER_SECURITY))
    return out


def pod_spec(p: Placement, containers: list[dict[str, Any]]) -> dict[str, Any]:
    """The Pod's ``spec`` around ``containers``: service account, pool, volumes, security; never restarted (the
    orchestrator retries a stage, with its own backoff, by exit code)."""
    vols, _ = volumes(p)
    spec: dict[str, Any] = {"serviceAccountName": p.service_account, "restartPolicy": "Never",
                            "activeDeadlineSeconds": p.timeout_s,  # a hung stage stops holding its GPUs
                            # no API token in a stage's pod unless it calls the API (the TrainJob launcher): a stage
                            # that only reads and writes S3 and MLflow has no use for the runner's RBAC
                            "automountServiceAccountToken": p.api_access}
    if p.node_selector:
        spec["nodeSelector"] = dict(p.node_selector)
    if p.tolerations:
        spec["tolerations"] = [dict(t) for t in p.tolerations]
    spec.update(securityContext=pod_security(p), containers=containers, volumes=vols)
    return spec


def pod(p: Placement, command: list[str] | None = None, name: str | None = None) -> dict[str, Any]:
    """The Pod that runs ``command`` under placement ``p``: the rendering every orchestrator consumes."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name or f"parathink-{k8s_name(p.stage)}", "namespace": p.namespace,
                     "labels": labels(p)},
        "spec": pod_spec(p, [container(p, command)]),
    }

"""The Kubernetes objects of one stage as plain dicts: its Pod, and for a multi-node stage its Kubeflow Trainer v2
``TrainJob``. Pure functions of a :class:`parathink.cluster.Placement` (no kfp, no Kubernetes client).

The KFP pipeline places its tasks through kfp-kubernetes (:mod:`parathink.kfp.tasks`); these dicts say the same
thing in the Kubernetes API's own words, so that a test can create them on a real API server and the launcher can
create the TrainJob. ``stage_objects`` is the entry point for such tests (docs/kubeflow.md).

The TrainJob follows kubeflow/trainer's API (``trainer.kubeflow.org/v1alpha1``): it names a runtime
(``trainer_runtime``, a ClusterTrainingRuntime such as ``torch-distributed``) and overrides only what differs:
``numNodes``, ``numProcPerNode``, ``resourcesPerNode``, the command and env, and through ``runtimePatches`` the
GPU pool's node selector and tolerations, the service account and the volumes. The torch runtime hands torchrun
its rendezvous through ``PET_*`` variables, so the command is plain ``torchrun -m parathink.cli stage NAME ...``.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from parathink.cluster import Placement

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
# The torch runtimes' replicated job and its container are both called "node" (kubeflow/trainer constants.Node).
NODE = "node"
# Owner of our runtimePatches entry (entries are keyed by manager, so Kueue or a webhook can add their own).
PATCH_MANAGER = "parathink.io/kfp"
STAGE_LABEL = "parathink.io/stage"
SHM_VOLUME, RUNS_VOLUME = "dshm", "runs"


def k8s_name(text: str) -> str:
    """``rl_easy`` -> ``rl-easy``: stage names as DNS labels (Pod and TrainJob names allow no underscore)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def stage_command(stage: str, run_dir: str, overrides: list[str]) -> list[str]:
    """The one call every orchestrator makes (docs/orchestration.md), as an argv: no shell, no quoting."""
    return ["parathink", "stage", stage, f"run_dir={run_dir}", *overrides]


def env(p: Placement) -> list[dict[str, Any]]:
    """Plain variables, then variables from Secrets (only the Secret's name and key appear, never a value)."""
    plain = [{"name": k, "value": v} for k, v in p.env.items()]
    from_secrets = [{"name": s.env, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
                    for s in p.secrets]
    return plain + from_secrets


def volumes(p: Placement) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): a memory-backed /dev/shm of ``shm_size`` (NCCL, DataLoader workers) and the PVC, if any."""
    vols = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": p.shm_size}}]
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    if p.volume:
        vols.append({"name": RUNS_VOLUME, "persistentVolumeClaim": {"claimName": p.volume["claim"]}})
        mounts.append({"name": RUNS_VOLUME, "mountPath": p.volume["mount_path"]})
    return vols, mounts


def resources(p: Placement) -> dict[str, dict[str, str]]:
    """Requests equal to limits (Guaranteed QoS), the GPUs included on the GPU pool."""
    amounts = dict(p.resources)
    if p.gpu:
        amounts[p.gpu_resource] = str(p.gpus_per_node)
    return {"requests": amounts, "limits": dict(amounts)}


def _scheduling(p: Placement) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceAccountName": p.service_account}
    if p.node_selector:
        spec["nodeSelector"] = dict(p.node_selector)
    if p.tolerations:
        spec["tolerations"] = [dict(t) for t in p.tolerations]
    return spec


def pod_manifest(p: Placement, command: list[str], name: str | None = None) -> dict[str, Any]:
    """The Pod that runs ``command`` under placement ``p`` (what a KFP task of a one-node stage asks for)."""
    vols, mounts = volumes(p)
    container = {"name": "main", "image": p.image, "imagePullPolicy": p.image_pull_policy, "command": command,
                 "env": env(p), "resources": resources(p), "volumeMounts": mounts}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name or f"parathink-{k8s_name(p.stage)}", "namespace": p.namespace,
                     "labels": {STAGE_LABEL: k8s_name(p.stage)}},
        "spec": {**_scheduling(p), "restartPolicy": "Never", "containers": [container], "volumes": vols},
    }


def trainjob_name(stage: str) -> str:
    """A fresh name per launch: a retried launch never collides with the TrainJob of the attempt before it."""
    return f"parathink-{k8s_name(stage)}-{secrets.token_hex(3)}"


def trainjob_manifest(p: Placement, command: list[str], name: str, owner: dict | None = None) -> dict[str, Any]:
    """The TrainJob that runs ``command`` (``parathink stage NAME ...``) under torchrun on ``p.nodes`` nodes;
    ``owner`` (an ownerReference to the launcher's Pod) makes Kubernetes delete it with that Pod."""
    vols, mounts = volumes(p)
    pod_patch = {"metadata": {"labels": {STAGE_LABEL: k8s_name(p.stage)}},
                 "spec": {**_scheduling(p), "volumes": vols, "containers": [{"name": NODE, "volumeMounts": mounts}]}}
    if command[:1] != ["parathink"]:
        raise ValueError(f"a TrainJob runs `parathink ...` under torchrun, got {command[:2]}")
    metadata = {"name": name, "namespace": p.namespace, "labels": {STAGE_LABEL: k8s_name(p.stage)}}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {
            "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": "ClusterTrainingRuntime", "name": p.trainer_runtime},
            "trainer": {
                "image": p.image,
                # `python -m parathink.cli` is the `parathink` command; torchrun starts procs_per_node of it per node.
                "command": ["torchrun", "-m", "parathink.cli", *command[1:]],
                "env": env(p),
                "numNodes": p.nodes,
                "numProcPerNode": p.procs_per_node,
                "resourcesPerNode": resources(p),
            },
            "runtimePatches": [{
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                    {"name": NODE, "template": {"spec": {"template": pod_patch}}}]}}},
            }],
        },
    }

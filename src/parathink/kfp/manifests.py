"""The Kubernetes objects of one stage as plain dicts: its Pod, and for a multi-node stage its Kubeflow Trainer v2
``TrainJob``. Pure functions of a :class:`parathink.placement.cluster.Placement` (no kfp, no Kubernetes client).

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

import secrets
from typing import Any

from parathink.placement import podspec
from parathink.placement.cluster import Placement
from parathink.placement.podspec import k8s_name

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
# The torch runtimes' replicated job and its container are both called "node" (kubeflow/trainer constants.Node).
NODE = "node"
# Owner of our runtimePatches entry (entries are keyed by manager, so Kueue or a webhook can add their own).
PATCH_MANAGER = "parathink.io/kfp"


def stage_command(stage: str, run_dir: str, overrides: list[str]) -> list[str]:
    """The one call every orchestrator makes (docs/orchestration.md), as an argv: no shell, no quoting."""
    return ["parathink", "stage", stage, f"run_dir={run_dir}", *overrides]


def trainjob_name(stage: str) -> str:
    """A fresh name per launch: a retried launch never collides with the TrainJob of the attempt before it."""
    return f"parathink-{k8s_name(stage)}-{secrets.token_hex(3)}"


def trainjob_manifest(p: Placement, command: list[str], name: str, owner: dict | None = None) -> dict[str, Any]:
    """The TrainJob that runs ``command`` (``parathink stage NAME ...``) under torchrun on ``p.nodes`` nodes;
    ``owner`` (an ownerReference to the launcher's Pod) makes Kubernetes delete it with that Pod."""
    # The runtime's pod, patched with the stage's: the container keeps the runtime's name and gets the mounts and the
    # restricted security context; the pod gets the pool, the service account, the volumes and the pod security.
    node = podspec.container(p, name=NODE)
    pod_patch = {"metadata": {"labels": podspec.labels(p)},
                 "spec": podspec.pod_spec(p, [{k: node[k] for k in ("name", "volumeMounts", "securityContext")}])}
    # Not patchable through runtimePatches (Trainer's schema prunes them): restarts are the JobSet's; the deadline is
    # the launcher pod's, which deletes this TrainJob when it is stopped; whether the nodes mount a service-account
    # token is the runtime's own pod template's (docs/deploy.md: set automountServiceAccountToken: false there).
    del pod_patch["spec"]["restartPolicy"], pod_patch["spec"]["activeDeadlineSeconds"]
    del pod_patch["spec"]["automountServiceAccountToken"]
    if command[:3] != ["parathink", "stage", p.stage]:
        raise ValueError(f"a TrainJob runs `parathink stage {p.stage} ...` under torchrun, got {command[:3]}")
    metadata = {"name": name, "namespace": p.namespace, "labels": podspec.labels(p)}
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
                # The placement's launch (`torchrun -m parathink.cli stage NAME`): torchrun starts procs_per_node
                # ranks per node, which run the stage at once (WORLD_SIZE is set: parathink.launch starts no more).
                "command": [*p.launch, *command[3:]],
                "env": node["env"],
                "numNodes": p.nodes,
                "numProcPerNode": p.procs_per_node,
                "resourcesPerNode": node["resources"],
            },
            "runtimePatches": [{
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                    {"name": NODE, "template": {"spec": {"template": pod_patch}}}]}}},
            }],
        },
    }

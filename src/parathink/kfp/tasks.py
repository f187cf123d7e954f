"""A stage's Pod (:func:`placement.podspec.pod`, the one rendering of a placement) applied to its KFP task: the image
and resources through the KFP SDK, the rest through kfp-kubernetes.

KFP builds the pod itself, so the Pod is translated field by field; a field this module does not know fails the
compile (``PodNotExpressible``) instead of being dropped. What KFP sets elsewhere, said here once:

- ``metadata.name`` (KFP names its pods), ``namespace`` and ``serviceAccountName`` (per run: ``kfp.Client`` sets them
  at submit time, :mod:`parathink.kfp.submit`), ``restartPolicy`` (KFP's pods never restart; a lost pod is retried
  by KFP's retry policy, :func:`retry_lost_pods`);
- the security context: kfp-kubernetes sets the pod's user, group and ``runAsNonRoot``; KFP's compiler and backend
  add ``allowPrivilegeEscalation: false``, ``capabilities.drop: [ALL]`` and the RuntimeDefault seccomp profile to
  every task container (kfp-kubernetes' ``set_security_context``), which is what the Pod asks for; ``fsGroup`` has
  no KFP counterpart (the KFP deployment's own default decides a PVC's group), so the scratch volume, which only
  ``fsGroup`` makes writable as a PVC, becomes an emptyDir (:func:`_scratch`);
- ``automountServiceAccountToken``: KFP's own driver and launcher run inside every task pod and reach the KFP API
  server and ML Metadata with the pod's service-account token, so a KFP task keeps it (the run's service account,
  set at submit time, decides what that token may do); the Airflow pods and the TrainJob's workers mount none;
- ``startup_timeout_s`` has no per-task counterpart in KFP v2; ``timeout_s`` (the Pod's ``activeDeadlineSeconds``)
  is KFP's ``kubernetes.set_timeout``, which bounds the whole task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kfp import kubernetes
from kfp.dsl import PipelineTask

from parathink.placement import podspec

SET_BY_KFP = {"name", "command"}  # container fields KFP fills in itself (its launcher runs our component)
# per run or KFP's own (module docstring)
SPEC_BY_RUN = {"serviceAccountName", "restartPolicy", "automountServiceAccountToken"}


class PodNotExpressible(ValueError):
    """A field of the rendered Pod that KFP cannot carry: the renderer and this translation disagree."""


def _check(fields: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = set(fields) - known
    if unknown:
        raise PodNotExpressible(f"{where}: {sorted(unknown)} has no KFP counterpart in parathink.kfp.tasks")


def _resources(task: PipelineTask, resources: Mapping[str, Mapping[str, str]]) -> None:
    # Requests equal limits in the Pod (Guaranteed QoS); any resource but cpu and memory is the accelerator.
    limits = dict(resources["limits"])
    if "cpu" in limits:
        task.set_cpu_request(limits.pop("cpu")).set_cpu_limit(resources["limits"]["cpu"])
    if "memory" in limits:
        task.set_memory_request(limits.pop("memory")).set_memory_limit(resources["limits"]["memory"])
    for accelerator, count in limits.items():
        task.set_accelerator_type(accelerator).set_accelerator_limit(int(count))


def _pool(task: PipelineTask, spec: Mapping[str, Any]) -> None:
    for key, value in (spec.get("nodeSelector") or {}).items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for t in spec.get("tolerations") or []:
        kubernetes.add_toleration(task, key=t.get("key"), operator=t.get("operator"), value=t.get("value"),
                                  effect=t.get("effect") or None, toleration_seconds=t.get("tolerationSeconds"))


def _environment(task: PipelineTask, env: list[Mapping[str, Any]]) -> None:
    for var in env:
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]
            kubernetes.use_secret_as_env(task, secret_name=ref["name"], secret_key_to_env={ref["key"]: var["name"]},
                                         optional=ref.get("optional", False))
        else:
            task.set_env_variable(var["name"], var["value"])


def _scratch(task: PipelineTask, volume: Mapping[str, Any], mount_path: str) -> None:
    """The scratch volume (a generic ephemeral volume in the Pod) as an emptyDir of the same size.

    The Pod's ``fsGroup`` makes a fresh volume writable by the stage's uid; KFP has no ``fsGroup`` (module
    docstring), and a new ext4 or xfs volume's root is root's, mode 755: the stage, uid 1000, could write nothing
    under ~/.cache (the hub's downloads, an s3:// run's checkpoints) and would fail at its first download. The
    kubelet makes an emptyDir's folder world-writable (0777), whatever the pod's security context. What it costs:
    the space comes from the node's own disk (its ephemeral storage), not from a StorageClass, so the GPU nodes
    need ``size`` of free local disk (``storage_class`` does not apply); ``sizeLimit`` keeps the limit, past which
    the kubelet evicts the pod (KFP's retry then runs it again, and it fails again: a scratch too small for the
    stage is a profile's error).
    """
    claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    kubernetes.empty_dir_mount(task, volume_name=volume["name"], mount_path=mount_path,
                               size_limit=claim["resources"]["requests"]["storage"])


def _storage(task: PipelineTask, volumes: list[Mapping[str, Any]], mounts: list[Mapping[str, Any]]) -> None:
    where = {m["name"]: m["mountPath"] for m in mounts}
    for v in volumes:
        if "emptyDir" in v:
            kubernetes.empty_dir_mount(task, volume_name=v["name"], mount_path=where[v["name"]],
                                       medium=v["emptyDir"].get("medium"), size_limit=v["emptyDir"].get("sizeLimit"))
        elif "persistentVolumeClaim" in v:
            kubernetes.mount_pvc(task, pvc_name=v["persistentVolumeClaim"]["claimName"], mount_path=where[v["name"]])
        elif "ephemeral" in v:
            _scratch(task, v, where[v["name"]])
        else:
            raise PodNotExpressible(f"volume {v['name']}: only emptyDir, PVC and ephemeral volumes are translated")


def _security(task: PipelineTask, pod_security: Mapping[str, Any], container_security: Mapping[str, Any]) -> None:
    if container_security != podspec.CONTAINER_SECURITY:  # KFP's compiler sets exactly these (module docstring)
        raise PodNotExpressible(f"container securityContext {dict(container_security)} differs from what KFP sets")
    kubernetes.set_security_context(task, run_as_user=pod_security["runAsUser"],
                                    run_as_group=pod_security["runAsGroup"],
                                    run_as_non_root=pod_security["runAsNonRoot"])


def retry_lost_pods(task: PipelineTask, retries: int, backoff_s: int) -> PipelineTask:
    """KFP's retry policy on ``task``: up to ``retries`` new pods, ``backoff_s`` apart, when the task failed.

    For a pod lost with its process (preempted, evicted, OOM-killed), which the component's in-process retries cannot
    see. KFP cannot tell those from a stage's own exit 2 or 3 (or an exit 1 already retried): the component records
    those as the task's verdict (parathink.kfp.verdict), and the retried pod exits with it at once. The profile's
    ``retries`` and ``retry_backoff_s``, as for exit 1: an S3 lease of a killed stage expires in a minute
    (parathink.rundir.lock), well within the backoff. No backoff growth: KFP's default factor would double it.
    """
    if retries > 0:
        task.set_retry(num_retries=retries, backoff_duration=f"{backoff_s}s", backoff_factor=1.0)
    return task


def place(task: PipelineTask, pod: Mapping[str, Any], display_name: str) -> PipelineTask:
    """Put ``task`` where the rendered ``pod`` says; caching off (the run directory's manifests decide what is
    up to date)."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    _check(pod["metadata"], {"name", "namespace", "labels"}, "metadata")
    _check(spec, {"containers", "volumes", "nodeSelector", "tolerations", "securityContext", "activeDeadlineSeconds"}
           | SPEC_BY_RUN, "spec")
    _check(container, {"image", "imagePullPolicy", "env", "resources", "volumeMounts", "securityContext"}
           | SET_BY_KFP, "container")
    task.set_display_name(display_name)
    task.set_container_image(container["image"])
    kubernetes.set_image_pull_policy(task, container["imagePullPolicy"])
    for key, value in pod["metadata"].get("labels", {}).items():
        kubernetes.add_pod_label(task, label_key=key, label_value=value)
    _resources(task, container["resources"])
    _pool(task, spec)
    _environment(task, container.get("env") or [])
    _storage(task, spec.get("volumes") or [], container.get("volumeMounts") or [])
    _security(task, spec["securityContext"], container["securityContext"])
    kubernetes.set_timeout(task, spec["activeDeadlineSeconds"])  # the pod's activeDeadlineSeconds
    # KFP keys its cache on parameter strings, not on the data behind run_dir: a rerun would be a stale hit.
    task.set_caching_options(enable_caching=False)
    return task

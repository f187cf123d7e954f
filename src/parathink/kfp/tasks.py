"""A stage's placement applied to its KFP task: the image, resources and GPUs through the KFP SDK, the rest through
kfp-kubernetes (node selector, tolerations, /dev/shm, Secrets as env, the PVC, the image pull policy).

What KFP cannot express is named here rather than dropped silently: the namespace and service account are per run
(``kfp.Client`` sets them at submit time, :mod:`parathink.kfp.submit`); ``startup_timeout_s`` has no per-task
counterpart in KFP v2 (``kubernetes.set_timeout`` bounds the whole task, and a GPU stage may train for days).
"""

from __future__ import annotations

from kfp import kubernetes
from kfp.dsl import PipelineTask

from parathink.cluster import Placement
from parathink.kfp.manifests import SHM_VOLUME, STAGE_LABEL, k8s_name


def _resources(task: PipelineTask, p: Placement) -> None:
    # Requests equal limits (Guaranteed QoS), as in the pods of parathink.kfp.manifests.
    if "cpu" in p.resources:
        task.set_cpu_request(p.resources["cpu"]).set_cpu_limit(p.resources["cpu"])
    if "memory" in p.resources:
        task.set_memory_request(p.resources["memory"]).set_memory_limit(p.resources["memory"])
    if p.gpu:
        task.set_accelerator_type(p.gpu_resource).set_accelerator_limit(p.gpus_per_node)


def _pool(task: PipelineTask, p: Placement) -> None:
    for key, value in p.node_selector.items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for t in p.tolerations:
        kubernetes.add_toleration(task, key=t.get("key"), operator=t.get("operator"), value=t.get("value"),
                                  effect=t.get("effect") or None, toleration_seconds=t.get("tolerationSeconds"))


def _environment(task: PipelineTask, p: Placement) -> None:
    for name, value in p.env.items():
        task.set_env_variable(name, value)
    for s in p.secrets:
        kubernetes.use_secret_as_env(task, secret_name=s.secret, secret_key_to_env={s.key: s.env})


def _storage(task: PipelineTask, p: Placement) -> None:
    kubernetes.empty_dir_mount(task, volume_name=SHM_VOLUME, mount_path="/dev/shm", medium="Memory",
                               size_limit=p.shm_size)
    if p.volume:
        kubernetes.mount_pvc(task, pvc_name=p.volume["claim"], mount_path=p.volume["mount_path"])


def place(task: PipelineTask, p: Placement) -> PipelineTask:
    """Put ``task`` where ``p`` says; caching off (the run directory's manifests decide what is up to date)."""
    task.set_display_name(p.stage)
    task.set_container_image(p.image)
    kubernetes.set_image_pull_policy(task, p.image_pull_policy)
    kubernetes.add_pod_label(task, label_key=STAGE_LABEL, label_value=k8s_name(p.stage))
    _resources(task, p)
    _pool(task, p)
    _environment(task, p)
    _storage(task, p)
    # KFP keys its cache on parameter strings, not on the data behind run_dir: a rerun would be a stale hit.
    task.set_caching_options(enable_caching=False)
    return task

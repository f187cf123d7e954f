"""Where each stage runs: the cluster profile (``hydra_conf/cluster/*.yaml``) turned into one placement per stage.

Every orchestrator places ``parathink stage NAME`` calls from this module's output, never from settings of its
own: the Airflow DAG (``executor=kubernetes``), the Kubeflow pipeline, the multi-node TrainJob manifests. They
get it from ``parathink plan [overrides]`` (JSON on stdout) or, in Python, from :func:`plan`. The module is pure
(no torch, no Kubernetes client): a placement is plain data that each orchestrator translates into its own API.

A stage is a *GPU stage* when the profile's accelerator is ``cuda``, it has GPUs per node, and the stage is in
``gpu_stages``; it then gets the GPU pool's node selector and tolerations, ``resources.gpu`` and the GPU count.
Every other stage gets ``resources.cpu`` on the default pool. ``stage_overrides`` adjusts one stage (for example
``{sft: {nodes: 2}}``: SFT becomes a two-node TrainJob).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from parathink.errors import ConfigError
from parathink.placement.roles import StageRole

ACCELERATORS = ("cpu", "cuda")
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# secrets: a stage's own identity (promote's MLflow user may move the registry's aliases; the others may not), merged
# over the profile's by variable.
OVERRIDABLE = {"gpus_per_node", "nodes", "resources", "timeout_s", "secrets"}
# Every key a profile may have (hydra_conf/cluster/*.yaml): a misspelt one ("sratch", "gpu_stage") would otherwise be
# ignored and its default used in silence.
PROFILE_KEYS = {"name", "accelerator", "image", "image_pull_policy", "namespace", "service_account", "runs_root",
                "gpu_resource", "gpus_per_node", "gpu_memory", "nodes", "gpu_stages", "hub_stages", "node_pool",
                "resources", "shm_size", "env", "secrets", "volume", "scratch", "retries", "timeout_s",
                "startup_timeout_s", "stage_overrides", "run_as_user", "trainer_runtime", "data_roots"}
# Kubernetes quantities (cpu "500m" / "32", memory "8Gi" / "512M"): checked here so that a typo fails at plan time.
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class SecretRef:
    """An environment variable filled from a Kubernetes Secret at pod start (its value is never in a config)."""

    env: str
    secret: str
    key: str
    # optional: the pod starts without the variable when the Secret is absent. Static S3 keys are optional so that a
    # cluster with workload identity (IRSA, GKE Workload Identity) needs no Secret: boto prefers the variables when set.
    optional: bool = False


@dataclass(frozen=True)
class Placement:
    """What one ``parathink stage NAME`` call needs from the cluster."""

    stage: str
    gpu: bool  # on the GPU pool
    gpus_per_node: int  # GPUs per pod (0 for CPU stages)
    nodes: int  # > 1: a multi-node TrainJob
    resources: dict[str, str]  # requests = limits: {"cpu": "32", "memory": "256Gi"}
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    image: str
    image_pull_policy: str
    namespace: str
    service_account: str
    shm_size: str
    env: dict[str, str]
    secrets: list[SecretRef]
    volume: dict[str, str] | None  # {"claim": PVC, "mount_path": PATH}
    retries: int  # for exit code 1 only
    retry_backoff_s: int
    startup_timeout_s: int
    timeout_s: int  # the stage's whole run, start-up included: the pod's activeDeadlineSeconds, KFP's task timeout
    gpu_resource: str = "nvidia.com/gpu"
    trainer_runtime: str = "torch-distributed"
    hub: bool = False  # downloads weights from the model hub (the profile's hub_stages): the NetworkPolicy lets it
    run_as_user: int = 1000  # the image's non-root uid (images/trainer: USER 1000); pods run as it, never as root
    # The stage's local files (the model hub's downloads: HF_HOME lies under it) on a volume of their own, made and
    # deleted with the pod, not on the node's disk: {"mount_path", "size", "storage_class" (None: the default)}.
    scratch: dict[str, Any] | None = None
    # A GPU stage's memory on one GPU (placement.memory_model, docs/gpu.md): {estimate_gib, capacity_gib, parts:
    # {weights, grads, optimizer, activations, logits, kv_cache, workspace}, note}; None on a CPU or with no shape.
    device_memory: dict[str, Any] | None = None
    # The vLLM teacher's engines over the pod's GPUs (teacher.vllm.parallel): {parallel: data | tensor, engines,
    # gpus_per_engine}; None for every other stage. Such a stage runs as one process: its engines are the GPUs' users.
    engines: dict[str, Any] | None = None
    # The pod calls the Kubernetes API with its service account's token (the KFP launcher of a multi-node stage
    # creates and watches its TrainJob); every other stage pod mounts no token (automountServiceAccountToken).
    api_access: bool = False
    procs_per_node: int = field(init=False)
    # The argv that starts the stage's processes on each node, before its overrides (parathink.launch, which runs it):
    # ``torchrun --nproc_per_node N -m parathink.cli stage NAME`` for a single-node stage of N > 1 GPUs,
    # ``torchrun -m parathink.cli stage NAME`` on a multi-node TrainJob (the runtime's PET_* variables give torchrun
    # the nodes and processes), ``parathink stage NAME`` (one process) otherwise.
    launch: list[str] = field(init=False)

    def __post_init__(self):
        # torchrun starts one process per GPU; a CPU stage, or one whose engines use the GPUs, runs as one process.
        procs = 1 if self.engines else max(1, self.gpus_per_node)
        object.__setattr__(self, "procs_per_node", procs)
        object.__setattr__(self, "launch", launch_argv(self.stage, procs, self.nodes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def launch_argv(stage: str, procs_per_node: int, nodes: int) -> list[str]:
    """The argv that starts ``stage`` with ``procs_per_node`` processes on each of ``nodes`` nodes (before its
    overrides): what :attr:`Placement.launch` holds and what every launcher runs (parathink.launch)."""
    module = ["-m", "parathink.cli", "stage", stage]  # `python -m parathink.cli` is the `parathink` command
    if nodes > 1:
        return ["torchrun", *module]
    if procs_per_node > 1:
        return ["torchrun", "--nproc_per_node", str(procs_per_node), *module]
    return ["parathink", "stage", stage]


VLLM_PARALLEL = ("data", "tensor")


def teacher_engines(cfg: Any, stage: str, gpus: int, nodes: int) -> dict[str, Any] | None:
    """The vLLM teacher's engines over its pod's ``gpus`` (``teacher.vllm.parallel``), or None: not the teacher,
    another backend, or no root config to read it from. ``data``: one engine per GPU, each with its share of the
    problems; ``tensor``: one engine over every GPU (tensor_parallel_size = ``gpus``). On a CPU: one engine."""
    if stage != "teacher" or not (hasattr(cfg, "get") and "cluster" in cfg) or cfg.get("teacher") is None:
        return None
    teacher = cfg.get("teacher")
    if str(teacher.get("backend")) != "vllm":
        return None
    vllm = teacher.get("vllm") or {}
    parallel = str(vllm.get("parallel", "data"))
    if parallel not in VLLM_PARALLEL:
        raise ConfigError(f"teacher.vllm.parallel: must be one of {VLLM_PARALLEL}, got {parallel!r}")
    if nodes > 1:
        raise ConfigError("cluster.stage_overrides.teacher.nodes: the vLLM teacher runs on one node (its engines "
                          "share no process group across nodes)")
    gpus = max(1, gpus)
    if parallel == "tensor":
        return {"parallel": parallel, "engines": 1, "gpus_per_engine": gpus}
    return {"parallel": parallel, "engines": gpus, "gpus_per_engine": 1}


def _get(profile: Mapping, key: str, where: str):
    if key not in profile:
        raise ConfigError(f"{where}.{key}: missing from the cluster profile")
    return profile[key]


def _quantity(value: Any, where: str) -> str:
    text = str(value)
    if not QUANTITY.match(text):
        raise ConfigError(f"{where}: {text!r} is not a Kubernetes quantity (e.g. '2', '500m', '8Gi')")
    return text


def _count(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: must be an integer >= {minimum}, got {value!r}")
    return value


def _resources(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or set(value) - {"cpu", "memory"} or not value:
        raise ConfigError(f"{where}: must be a mapping with 'cpu' and/or 'memory', got {value!r}")
    return {k: _quantity(v, f"{where}.{k}") for k, v in value.items()}


def _tolerations(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list, got {value!r}")
    out = []
    for i, tol in enumerate(value):
        w = f"{where}[{i}]"
        if not isinstance(tol, Mapping) or set(tol) - TOLERATION_KEYS:
            raise ConfigError(f"{w}: keys must be among {sorted(TOLERATION_KEYS)}, got {tol!r}")
        if tol.get("operator", "Equal") not in TOLERATION_OPERATORS:
            raise ConfigError(f"{w}.operator: must be one of {TOLERATION_OPERATORS}, got {tol.get('operator')!r}")
        if tol.get("effect", "") not in TOLERATION_EFFECTS:
            raise ConfigError(f"{w}.effect: must be one of {TOLERATION_EFFECTS[:3]}, got {tol.get('effect')!r}")
        if tol.get("operator") == "Exists" and tol.get("value"):
            raise ConfigError(f"{w}: operator Exists takes no value")
        out.append(dict(tol))
    return out


def image_env(image: str) -> dict[str, str]:
    """What a pod knows of its image: ``PARATHINK_IMAGE`` (the reference), and ``PARATHINK_IMAGE_DIGEST`` when the
    reference pins a digest (``repo@sha256:...``, what a deployment should set): the code identity lineage records."""
    env = {"PARATHINK_IMAGE": image}
    if "@" in image:
        env["PARATHINK_IMAGE_DIGEST"] = image.rsplit("@", 1)[1]
    return env


def _string_map(value: Any, where: str, keys: re.Pattern | None = None) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping, got {value!r}")
    for k in value:
        if keys is not None and not keys.match(str(k)):
            raise ConfigError(f"{where}: {k!r} is not a valid environment variable name")
    return {str(k): str(v) for k, v in value.items()}


def _secrets(value: Any, where: str) -> list[SecretRef]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping ENV: {{secret: NAME, key: KEY}}, got {value!r}")
    out = []
    for env, ref in value.items():
        w = f"{where}.{env}"
        if not ENV_NAME.match(str(env)):
            raise ConfigError(f"{w}: not a valid environment variable name")
        if not isinstance(ref, Mapping) or not {"secret", "key"} <= set(ref) <= {"secret", "key", "optional"}:
            raise ConfigError(f"{w}: must be {{secret: NAME, key: KEY[, optional: true]}}, got {ref!r}")
        if not isinstance(ref.get("optional", False), bool):
            raise ConfigError(f"{w}.optional: must be true or false, got {ref['optional']!r}")
        if not DNS_NAME.match(str(ref["secret"])):
            raise ConfigError(f"{w}.secret: {ref['secret']!r} is not a valid Secret name")
        out.append(SecretRef(env=str(env), secret=str(ref["secret"]), key=str(ref["key"]),
                             optional=ref.get("optional", False)))
    return out


def _stage_secrets(profile: list[SecretRef], stage: list[SecretRef]) -> list[SecretRef]:
    """The profile's secrets with the stage's own in place of those of the same variable."""
    mine = {r.env: r for r in stage}
    return [mine.pop(r.env, r) for r in profile] + list(mine.values())


BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3}


def quantity_bytes(text: str) -> float:
    """A (valid) Kubernetes quantity as a number: ``8Gi`` -> 8589934592."""
    number, _, suffix = QUANTITY.match(text).groups()
    return float(number) * (BINARY.get(suffix) or DECIMAL.get(suffix) or 1)


def _kind_quantity(value: Any, kind: str, at: str) -> tuple[str, str]:
    """A quantity given once for both kinds of stage or as ``{gpu: ..., cpu: ...}``: (this kind's, where it is)."""
    where = at
    if isinstance(value, Mapping):
        where = f"{at}.{kind}"
        if kind not in value:
            raise ConfigError(f"{where}: missing ({at.rsplit('.', 1)[-1]} is one quantity or {{gpu: ..., cpu: ...}})")
        value = value[kind]
    return _quantity(value, where), where


def _shm(value: Any, kind: str, resources: Mapping) -> str:
    """``shm_size`` for this kind of stage: one quantity for both, or ``{gpu: ..., cpu: ...}``. A memory-backed
    /dev/shm counts against the pod's memory limit, so one at or above it is a placement that cannot work."""
    shm, where = _kind_quantity(value, kind, "cluster.shm_size")
    memory = resources.get("memory") if isinstance(resources, Mapping) else None
    if memory and QUANTITY.match(str(memory)) and quantity_bytes(shm) >= quantity_bytes(str(memory)):
        raise ConfigError(f"{where}: {shm} is not below the {kind} pods' memory {memory} (a memory-backed /dev/shm "
                          "counts against it)")
    return shm


def _volume(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"claim", "mount_path"}:
        raise ConfigError(f"{where}: must be null or {{claim: PVC_NAME, mount_path: /path}}, got {value!r}")
    if not str(value["mount_path"]).startswith("/"):
        raise ConfigError(f"{where}.mount_path: must be an absolute path, got {value['mount_path']!r}")
    return {"claim": str(value["claim"]), "mount_path": str(value["mount_path"])}


def _scratch(value: Any, kind: str, where: str) -> dict[str, Any] | None:
    """``scratch``: null, or {mount_path, size (one quantity or {gpu, cpu}), storage_class (null: the default)}."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not {"mount_path", "size"} <= set(value) <= {"mount_path", "size",
                                                                                        "storage_class"}:
        raise ConfigError(f"{where}: must be null or {{mount_path: /path, size: QUANTITY or {{gpu: ..., cpu: ...}}, "
                          f"storage_class: NAME or null}}, got {value!r}")
    if not str(value["mount_path"]).startswith("/"):
        raise ConfigError(f"{where}.mount_path: must be an absolute path, got {value['mount_path']!r}")
    size, _ = _kind_quantity(value["size"], kind, f"{where}.size")
    storage_class = value.get("storage_class")
    return {"mount_path": str(value["mount_path"]), "size": size,
            "storage_class": None if storage_class is None else str(storage_class)}


def _profile_dict(cfg) -> dict:
    """The ``cluster`` section as plain data (a DictConfig, a dict, or a composed root config)."""
    section = cfg.get("cluster") if hasattr(cfg, "get") and "cluster" in cfg else cfg
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency; plain dicts work without it
        pass
    if not isinstance(section, Mapping):
        raise ConfigError(f"cluster: must be a mapping (a file of hydra_conf/cluster/), got {section!r}")
    return dict(section)


def placement(cfg, stage: str) -> Placement:
    """The placement of ``stage`` under the config's cluster profile; raises ConfigError naming the bad key.
    ``cfg`` is the composed root config or its ``cluster`` section (then the teacher's engines are not known)."""
    root = cfg
    p = _profile_dict(cfg)
    w = "cluster"
    unknown = sorted(set(p) - PROFILE_KEYS)
    if unknown:
        raise ConfigError(f"cluster.{unknown[0]}: not a cluster profile key (known: {', '.join(sorted(PROFILE_KEYS))})")
    accelerator = _get(p, "accelerator", w)
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"cluster.accelerator: must be one of {ACCELERATORS}, got {accelerator!r}")
    gpu_stages = _get(p, "gpu_stages", w)
    if not isinstance(gpu_stages, list):
        raise ConfigError(f"cluster.gpu_stages: must be a list of stage names, got {gpu_stages!r}")
    overrides = _get(p, "stage_overrides", w) or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"cluster.stage_overrides: must be a mapping stage -> settings, got {overrides!r}")
    mine = overrides.get(stage) or {}
    bad = set(mine) - OVERRIDABLE
    if bad:
        raise ConfigError(f"cluster.stage_overrides.{stage}: unknown keys {sorted(bad)} "
                          f"(allowed: {sorted(OVERRIDABLE)})")
    gpus = _count(mine.get("gpus_per_node", _get(p, "gpus_per_node", w)), f"{w}.gpus_per_node", 0)
    gpu = accelerator == "cuda" and gpus > 0 and stage in gpu_stages
    kind = "gpu" if gpu else "cpu"
    resources = _get(p, "resources", w)
    if not isinstance(resources, Mapping) or kind not in resources:
        raise ConfigError(f"cluster.resources.{kind}: missing (resources needs 'gpu' and 'cpu' entries)")
    pool = _get(p, "node_pool", w) or {}
    if not isinstance(pool, Mapping) or set(pool) - {"node_selector", "tolerations"}:
        raise ConfigError(f"cluster.node_pool: must be {{node_selector: {{...}}, tolerations: [...]}}, got {pool!r}")
    pull = _get(p, "image_pull_policy", w)
    if pull not in PULL_POLICIES:
        raise ConfigError(f"cluster.image_pull_policy: must be one of {PULL_POLICIES}, got {pull!r}")
    timeouts = _get(p, "timeout_s", w)
    if not isinstance(timeouts, Mapping) or kind not in timeouts:
        raise ConfigError(f"cluster.timeout_s.{kind}: missing (timeout_s needs 'gpu' and 'cpu' entries, in seconds)")
    retries = _get(p, "retries", w)
    if not isinstance(retries, Mapping) or set(retries) != {"max", "backoff_s"}:
        raise ConfigError(f"cluster.retries: must be {{max: N, backoff_s: S}}, got {retries!r}")
    nodes = _count(mine.get("nodes", _get(p, "nodes", w)), f"{w}.nodes", 1) if gpu else 1
    return Placement(
        stage=stage,
        gpu=gpu,
        gpus_per_node=gpus if gpu else 0,
        nodes=nodes,
        resources=_resources(mine.get("resources", resources[kind]), f"{w}.resources.{kind}"),
        node_selector=_string_map(pool.get("node_selector") or {}, f"{w}.node_pool.node_selector") if gpu else {},
        tolerations=_tolerations(pool.get("tolerations") or [], f"{w}.node_pool.tolerations") if gpu else [],
        image=str(_get(p, "image", w)),
        image_pull_policy=pull,
        namespace=str(_get(p, "namespace", w)),
        service_account=str(_get(p, "service_account", w)),
        shm_size=_shm(_get(p, "shm_size", w), kind, mine.get("resources", resources[kind])),
        # PARATHINK_IMAGE: the image the pod runs, one meaning everywhere (config.deployment sets the image from it,
        # tracking.lineage records it in each stage's MLflow run), and its digest when the reference pins one
        env={**_string_map(_get(p, "env", w) or {}, f"{w}.env", ENV_NAME), **image_env(str(_get(p, "image", w)))},
        secrets=_stage_secrets(_secrets(_get(p, "secrets", w) or {}, f"{w}.secrets"),
                               _secrets(mine.get("secrets") or {}, f"{w}.stage_overrides.{stage}.secrets")),
        volume=_volume(_get(p, "volume", w), f"{w}.volume"),
        scratch=_scratch(p.get("scratch"), kind, f"{w}.scratch"),
        retries=_count(retries["max"], f"{w}.retries.max", 0),
        retry_backoff_s=_count(retries["backoff_s"], f"{w}.retries.backoff_s", 0),
        startup_timeout_s=_count(_get(p, "startup_timeout_s", w), f"{w}.startup_timeout_s", 1),
        timeout_s=_count(mine.get("timeout_s", timeouts[kind]), f"{w}.timeout_s.{kind}", 1),
        gpu_resource=str(p.get("gpu_resource", "nvidia.com/gpu")),
        trainer_runtime=str(p.get("trainer_runtime", "torch-distributed")),
        run_as_user=_count(p.get("run_as_user", 1000), f"{w}.run_as_user", 1),
        hub=stage in (p.get("hub_stages") or []),
        engines=teacher_engines(root, stage, gpus if gpu else 0, nodes),
    )


def plan(cfg, roles: Mapping[str, StageRole]) -> dict[str, Placement]:
    """{stage: placement} for the stages ``roles`` names (each stage's ``StageSpec.role``), in order; with a composed
    root config, refused (ConfigError) when a placement cannot hold the model (:func:`check_memory`)."""
    p = _profile_dict(cfg)
    placements = {stage: placement(cfg, stage) for stage in roles}  # the root config: the teacher's engines
    model = cfg.get("model") if hasattr(cfg, "get") and "cluster" in cfg else None
    if model is not None:
        placements = {stage: _with_device_memory(cfg, pl, roles[stage], p.get("gpu_memory"))
                      for stage, pl in placements.items()}
        # a GPU placement with an estimate was checked against its GPU; a CPU one against its pod's memory here
        check_memory(model, p.get("gpu_memory"),
                     {s: pl for s, pl in placements.items() if not (pl.gpu and pl.device_memory)}, roles)
    return placements


def _with_device_memory(cfg, p: Placement, role: StageRole, gpu_memory: Any) -> Placement:
    """``p`` with its device memory estimate: per GPU on the GPU pool (refused, ConfigError, when it exceeds the
    GPU); on a CPU placement the same parts for its process's tensors (no CUDA workspace, no capacity to check:
    the estimate a CPU rehearsal's measured peak is held to). As it is for a stage that holds no model or a model
    config without its shape."""
    from dataclasses import replace

    from parathink.placement import memory_model

    if p.gpu and gpu_memory:
        capacity = quantity_bytes(_quantity(gpu_memory, "cluster.gpu_memory"))
        budget = memory_model.stage_budget(cfg, p.stage, role, p.gpus_per_node * p.nodes, capacity)
    elif p.gpu:
        return p  # a GPU profile without gpu_memory: nothing to size against
    else:
        budget = memory_model.stage_budget(cfg, p.stage, role, _cpu_ranks(cfg), None)
    if budget is None:
        return p
    if p.gpu:
        memory_model.check(p.stage, budget)
    return replace(p, device_memory=budget.to_dict())


def _cpu_ranks(cfg) -> int:
    """The processes a CPU stage shares its ZeRO partitions over: torchrun's WORLD_SIZE when planned inside it."""
    import os

    return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))


HEADROOM = 0.9  # of a GPU's or a pod's memory: the rest is for activations, the KV cache, the CUDA context
HALF = ("bfloat16", "float16")


def check_memory(model: Mapping, gpu_memory: Any, placements: Mapping[str, Placement],
                 roles: Mapping[str, StageRole]) -> None:
    """Refuse a placement that cannot hold the model (``model.params``; a model config without it is not checked).

    The estimate is the model's states, a floor of what a stage needs: weights (2 bytes a parameter in bf16, 4 in
    fp32) wherever the stage loads the model; for a training stage on GPUs also gradients and Adam's fp32 master
    weights and moments (``2 + 12`` bytes a parameter), sharded over all the stage's GPUs as ZeRO-2 shards them.
    A GPU stage is checked against ``cluster.gpu_memory`` (per GPU), a CPU stage against its pod's memory.
    """
    params = model.get("params")
    if not params:
        return
    width = 2 if str(model.get("dtype")) in HALF else 4
    weights = float(params) * width
    for stage, p in placements.items():
        role = roles[stage]
        if not role.loads_model:
            continue
        if p.gpu and gpu_memory:
            gpus = p.gpus_per_node * p.nodes
            need = weights + (float(params) * (width + 12) / gpus if role.trains_model else 0)
            have, what = quantity_bytes(_quantity(gpu_memory, "cluster.gpu_memory")), f"cluster.gpu_memory {gpu_memory}"
            where = f"per GPU on {gpus} GPUs"
        elif not p.gpu and "memory" in p.resources:
            memory = p.resources["memory"]
            need, have, what = weights, quantity_bytes(memory), f"its pod's memory {memory}"
            where = "in a CPU pod"
        else:
            continue
        if need > HEADROOM * have:
            raise ConfigError(f"cluster: {stage} cannot hold the model: {float(params) / 1e9:.1f}B parameters in "
                              f"{model.get('dtype')} need about {need / 2**30:.1f} GiB {where} (weights"
                              f"{', gradients and Adam states' if p.gpu and role.trains_model else ''}), "
                              f"{what} leaves {HEADROOM * have / 2**30:.1f} GiB")


def _on_volume(path: str, volume: Mapping[str, str] | None) -> bool:
    return volume is not None and posixpath.normpath(path).startswith(volume["mount_path"].rstrip("/") + "/")


def pod_run_dir(run_dir: str, runs_root: str, volume: Mapping[str, str] | None) -> str | None:
    """The run directory as every pod of a cluster sees it, or None when no pod can see it: the one rule for a
    relative ``run_dir`` (docs/orchestration.md, "Run directories on a cluster"), for KFP and Airflow alike.

    A relative run directory is a folder on one machine; every pod has its own disk. So it moves under the profile's
    ``runs_root`` (the default ``runs/<experiment>`` becomes ``<runs_root>/<experiment>``: a leading ``runs/``, the
    local root, is dropped) when that root is shared: object storage (``s3://...``) or a path on the profile's
    volume. The result must be shared too; anything else (a relative path under the local profile, an absolute path
    on no volume) is None.
    """
    def shared(path: str) -> bool:
        return "://" in path or _on_volume(path, volume)

    if "://" not in run_dir and not run_dir.startswith("/") and shared(runs_root.rstrip("/") + "/x"):
        parts = [p for p in posixpath.normpath(run_dir).split("/") if p not in ("", ".")]
        if parts and parts[0] == "runs":
            parts = parts[1:]
        if not parts or ".." in parts:
            raise ConfigError(f"run_dir: {run_dir!r} does not name a folder under cluster.runs_root {runs_root!r}")
        run_dir = runs_root.rstrip("/") + "/" + "/".join(parts)
    return run_dir if shared(run_dir) else None

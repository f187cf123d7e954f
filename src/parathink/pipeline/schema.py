"""The composed config's schema, key by key, and the one rule every command applies to it.

Every top-level key of ``hydra_conf/config.yaml``'s composition is a field of ``RootConfig``: a stage section has
its stage's class (``SFTConfig``, ``RLConfig``, ...; each documents its options), a config group the class below
(``ModelConfig``, ``DataConfig``, ``TrackingConfig``, ``ClusterProfile``; the group's YAML files document the
values), a run setting (``seed``, ``stages``, ...) its type. :func:`check` refuses, in one line that names the full
key and what is allowed:

- a key the schema does not have, at any depth (Hydra's ``+key=value`` adds any key, schema or not);
- a value of the wrong type, or a missing one;
- a value outside the bounds or choices its field declares (``parathink.config.fields``), a float that is not
  finite, an integer past ``config.fields.INT_CEILING``;
- ``stages`` empty or naming a stage twice; ``run_dir``, ``stage_cache`` or ``cache_dir`` a URL of a scheme other
  than ``s3://`` (``http://host/x`` would become the local folder ``./http:/host/x``); ``tracking.uri`` of a scheme
  MLflow cannot store to (``TRACKING_SCHEMES``).

``parathink.pipeline.compose.compose`` runs it on every composition, so ``parathink run``, ``stage``, ``plan`` and every
orchestrator refuse such a key before anything starts (exit 2). What needs more than one key, a file or the machine
(``sft.global_batch`` a multiple of ``sft.micro_batch``, a DeepSpeed JSON that exists, a cluster quantity, a model
that fits its GPUs) is each stage's ``validate`` and ``placement.cluster``'s, run by ``parathink.pipeline.runner``
before the first stage starts. A plug-in stage's section (its name in ``stage_modules``) is its own module's to
check. No torch here.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from parathink.config.base import BaseConfig
from parathink.config.eval import EvalConfig
from parathink.config.fields import (
    at_least,
    beyond_any_field,
    one_of,
    optional_of,
    requirement,
    seed,
    violation,
    within,
)
from parathink.config.filter import FilterStageConfig
from parathink.config.promote import PromoteConfig, PromoteStageConfig
from parathink.config.rl import RLConfig
from parathink.config.sft import SFTConfig
from parathink.config.teacher import TeacherConfig
from parathink.config.tracking import TRACKING_SCHEMES
from parathink.errors import ConfigError
from parathink.formats.tags import GRAMMARS, MAX_PARATHINKER_PATHS
from parathink.placement.cluster import ACCELERATORS, PULL_POLICIES

# parathink.modeling.factory's dtype names (a test keeps them equal; listed here so that checking needs no torch)
DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
TRACKING_BACKENDS = ("mlflow", "jsonl", "none")
# transformers' attention implementations; a structured layout needs sdpa or eager (the stages refuse the others)
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
GROUPS = ("model", "data", "tracking", "cluster")  # RootConfig's other sections are stages
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
SCALES = ("full", "cpu")  # hydra_conf/scale/*.yaml: the sizes a run keeps or shrinks


# ---------------------------------------------------------------- config groups (values: hydra_conf/<group>/*.yaml)

@dataclass(frozen=True)
class TokenizerSettings:
    """``model.tokenizer``: the tiny model's BPE, trained on the synthetic corpus (hydra_conf/model/tiny.yaml)."""

    corpus_size: int = at_least(1, MISSING)
    vocab_size: int = at_least(1, MISSING)
    min_frequency: int = at_least(1, MISSING)


@dataclass(frozen=True)
class ModelConfig:
    """``model`` (hydra_conf/model/*.yaml, each key documented there)."""

    name: str = MISSING
    kind: str = one_of(("tiny", "pretrained"), MISSING)
    source: str = MISSING
    dtype: str = one_of(DTYPES, MISSING)
    attn_implementation: str = one_of(ATTENTION, MISSING)  # sdpa and eager take the 4-D structured mask
    init_seed: int = seed(MISSING)
    parathinker_max_paths: int = within(0, MAX_PARATHINKER_PATHS, MISSING)
    params: float | None = at_least(1, None)  # parameters, for `parathink plan`'s memory check; null = unchecked
    tokenizer: TokenizerSettings | None = None  # the tiny model's only
    config: dict[str, Any] | None = None  # Qwen3Config fields of a model the base stage builds (the tiny one)


@dataclass(frozen=True)
class DataConfig:
    """``data`` (hydra_conf/data/*.yaml)."""

    name: str = MISSING
    cold_start: list[Any] = MISSING  # the teacher's problem sets (parathink.data.sources specs; checked by teacher)


@dataclass(frozen=True)
class TrackingConfig:
    """``tracking`` (hydra_conf/tracking/*.yaml)."""

    backend: str = one_of(TRACKING_BACKENDS, MISSING)
    uri: str | None = None
    experiment: str = MISSING
    artifact_location: str | None = None
    registered_model: str = MISSING
    register_models: bool = MISSING
    promote: PromoteConfig = field(default_factory=PromoteConfig)


@dataclass(frozen=True)
class PerKind:
    """A cluster setting given once for GPU stages and once for CPU stages."""

    gpu: Any = MISSING
    cpu: Any = MISSING


@dataclass(frozen=True)
class NodePool:
    node_selector: dict[str, Any] = field(default_factory=dict)
    tolerations: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Retries:
    max: int = at_least(0, MISSING)
    backoff_s: int = at_least(0, MISSING)


@dataclass(frozen=True)
class ClusterProfile:
    """``cluster`` (hydra_conf/cluster/gpu.yaml documents every key): its keys, their types, choices and counts.
    The rest (quantities, tolerations, volumes, the model fitting its GPUs) is ``placement.cluster``'s to check."""

    name: str = MISSING
    accelerator: str = one_of(ACCELERATORS, MISSING)
    image: str = MISSING
    image_pull_policy: str = one_of(PULL_POLICIES, MISSING)
    namespace: str = MISSING
    service_account: str = MISSING
    runs_root: str = MISSING
    # where a trigger form may point data and eval URIs; PARATHINK_DATA_ROOTS overrides it (parathink.form_policy)
    data_roots: list[str] = field(default_factory=list)
    gpu_resource: str = MISSING
    gpus_per_node: int = at_least(0, MISSING)
    gpu_memory: str | None = None
    nodes: int = at_least(1, MISSING)  # > 1: a GPU stage runs as a TrainJob across nodes
    gpu_stages: list[str] = MISSING
    hub_stages: list[str] = field(default_factory=list)
    node_pool: NodePool = field(default_factory=NodePool)
    resources: PerKind = field(default_factory=PerKind)
    shm_size: Any = MISSING  # one quantity, or {gpu, cpu}
    env: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)
    volume: Any = None
    scratch: Any = None
    retries: Retries = field(default_factory=Retries)
    timeout_s: PerKind = field(default_factory=PerKind)
    startup_timeout_s: int = at_least(1, MISSING)
    stage_overrides: dict[str, Any] = field(default_factory=dict)
    run_as_user: int = at_least(1, MISSING)  # never root
    trainer_runtime: str = MISSING


# ---------------------------------------------------------------- the whole config

@dataclass
class RootConfig:
    """What ``parathink.pipeline.compose.compose`` returns (hydra_conf/config.yaml documents the run settings)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    # one section per stage, its stage's settings (hydra_conf/stage/<stage>.yaml)
    base: BaseConfig = field(default_factory=BaseConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    filter: FilterStageConfig = field(default_factory=FilterStageConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rl_easy: RLConfig = field(default_factory=RLConfig)
    rl_hard: RLConfig = field(default_factory=RLConfig)
    rl_scaffold: RLConfig = field(default_factory=RLConfig)
    grpo_baseline: RLConfig = field(default_factory=RLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    promote: PromoteStageConfig = field(default_factory=PromoteStageConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cluster: ClusterProfile = field(default_factory=ClusterProfile)
    # the run's own settings
    experiment_name: str = MISSING
    run_dir: str = MISSING
    seed: int = seed(MISSING)  # in [0, 2^32): every generator a stage seeds (numpy's, torch's, random's) takes it
    format: str = one_of(GRAMMARS, MISSING)
    stages: list[str] = MISSING
    force: list[str] = field(default_factory=list)
    cache_dir: str | None = None
    # A store of published stage outputs shared by run directories (a local folder or s3:// prefix; null: none): a
    # stage whose config, seed and inputs another run directory already computed is copied from it, checked file by
    # file, instead of run (parathink.rundir.cache, docs/reliability.md).
    stage_cache: str | None = None
    stage_modules: dict[str, str] = field(default_factory=dict)
    # full: the sizes the experiment gives | cpu: its code paths at toy sizes on a CPU (hydra_conf/scale/cpu.yaml)
    scale: str = one_of(SCALES, "full")
    # Each stage's device-memory peak in its _timings.json (placement.peak.DevicePeak): null (auto) on a GPU only
    # (CUDA's counter costs nothing); true on a CPU too (the profiler's live-tensor peak, ~7 us an allocation:
    # scale=cpu turns it on for the rehearsal); false nowhere. PARATHINK_CPU_PEAK=1 / 0 turns the CPU's on / off.
    measure_device_memory: bool | None = None


def check(cfg: DictConfig) -> None:
    """Refuse a composed config with a key, a type or a value its schema does not allow (``ConfigError``, one line
    starting ``config:`` and naming the full key). Changes nothing in ``cfg``."""
    plugins = set(cfg.get("stage_modules") or {})
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    except OmegaConfBaseException as err:
        raise ConfigError(f"config: {err.full_key}: {_first_line(err)}") from None
    # As written, so that a wrong value is named where it was set, not where an interpolation copies it to (an
    # interpolation fits any typed field until it is read); the walk then reads, and so types, every value.
    values = OmegaConf.to_container(cfg, resolve=False)
    merged = _merge(values, plugins)
    try:
        _check_values(merged, RootConfig, "", skip=plugins)
    except (ValidationError, ConfigTypeError) as err:  # an interpolation's value, of the wrong type for its field
        raise ConfigError(f"config: {wrong_value(err.full_key, OmegaConf.select(cfg, err.full_key))}") from None
    _check_stage_overrides(values, plugins)
    _check_run_settings(resolved)


def _check_run_settings(values: dict) -> None:
    """What a single field's type and bounds cannot say: ``stages`` a list of distinct names, the locations of the
    run a path or ``s3://``, the tracking store one MLflow writes to."""
    stages = [str(s) for s in values.get("stages") or []]
    if not stages:
        raise ConfigError("config: stages: must name at least one stage, got []")
    repeated = sorted({s for s in stages if stages.count(s) > 1})
    if repeated:
        raise ConfigError(f"config: stages: names {', '.join(map(repr, repeated))} more than once: a stage runs once "
                          f"per run, got {stages}")
    for key in ("run_dir", "stage_cache", "cache_dir"):
        where = values.get(key)
        scheme = url_scheme(str(where)) if where is not None else None
        if scheme is not None and (scheme != "s3" or key == "cache_dir"):  # cache_dir is local disk
            allowed = "a local path" if key == "cache_dir" else "a local path or an s3:// URI"
            raise ConfigError(f"config: {key}: must be {allowed}, got {where!r} (a {scheme}:// URL)")
    tracking = values.get("tracking") or {}
    uri = tracking.get("uri")
    if tracking.get("backend") == "mlflow" and uri is not None:
        scheme = (url_scheme(str(uri)) or "").split("+")[0].lower()
        if scheme not in TRACKING_SCHEMES:
            from parathink.redact import redact_text

            raise ConfigError(f"config: tracking.uri: {redact_text(str(uri))!r} is not a store MLflow tracks to "
                              f"(schemes: a path, {', '.join(s + ':' for s in TRACKING_SCHEMES if s)})")


def url_scheme(value: str) -> str | None:
    """The scheme of a URL, lower case (``http`` of ``http://host/x``); None for a path (``runs/a``, ``a:b``)."""
    m = _URL.match(value.strip())
    return m.group(1).lower() if m else None


def _merge(values: dict, plugins: set[str]) -> DictConfig:
    """``values`` merged into the schema: what no field takes, or takes with another type, raises. A plug-in's own
    section is carried over unchecked, for the interpolations that read it."""
    try:
        merged = OmegaConf.merge(_schema(), {k: v for k, v in values.items() if k not in plugins})
        with open_dict(merged):
            for name in plugins - set(merged):
                merged[name] = values.get(name)
        return merged
    except (ConfigKeyError, ConfigAttributeError) as err:
        raise ConfigError(f"config: {unknown_key(err.full_key)}") from None
    except (ValidationError, ConfigTypeError) as err:
        key = err.full_key or _scalar_for_section(values, RootConfig, "")  # OmegaConf names no key for those
        value = err.value if err.full_key else OmegaConf.select(OmegaConf.create(values), key)
        raise ConfigError(f"config: {wrong_value(key, value)}") from None


def _scalar_for_section(values: Any, schema: type, prefix: str) -> str:
    """The first key whose field is a section (a schema class) and whose value is not a mapping."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        base, nullable = optional_of(hints[f.name])
        if not dataclasses.is_dataclass(base) or f.name not in values:
            continue
        value = values[f.name]
        if isinstance(value, dict):
            found = _scalar_for_section(value, base, f"{prefix}{f.name}.")
            if found:
                return found
        elif not (value is None and nullable):
            return f"{prefix}{f.name}"
    return ""


def unknown_key(key: str) -> str:
    """The message for a key no schema has: the key, and the keys its parent takes."""
    parent, _, _ = key.rpartition(".")
    schema = _schema_at(parent)
    if schema is None:
        return f"unknown config key {key!r}"
    known = ", ".join(sorted(f.name for f in dataclasses.fields(schema)))
    if not parent:
        return (f"unknown config key {key!r} (not a stage, a config group or a run setting: {known}; a plug-in "
                f"stage's section comes with its stage_modules.{key} entry)")
    return f"unknown config key {key!r} ({parent} takes: {known})"


def wrong_value(key: str, value: Any) -> str:
    """The message for a value its field does not take: the key, what it must be, what it is."""
    at = _field_at(key)
    if at is None:
        return f"{key}: not allowed here, got {value!r}"
    return f"{key}: must be {requirement_for(at, value)}, got {value!r}"


def requirement_for(at: tuple[Any, dataclasses.Field], value: Any) -> str:
    """``requirement`` of the field, with the rule every field keeps that ``value`` breaks (finite, not past the
    integer ceiling) when its own bounds do not already say it."""
    hint, f = at
    required = requirement(hint, f)
    broken = beyond_any_field(value)
    if broken is None or f.metadata.get("bounds", (None, None))[1] is not None:
        return required
    if broken.startswith("a finite"):
        return required.replace("a number", "a finite number", 1) if "a number" in required else broken
    return f"{required}, {broken.removeprefix('an integer ')}"


# ---------------------------------------------------------------- walking the schema

@functools.cache
def _schema() -> DictConfig:
    """The schema as a config to merge into (``OmegaConf.merge`` copies it: this one is never written to)."""
    node = OmegaConf.structured(RootConfig)
    writable(node)  # the stage classes are frozen: their nodes are read-only, and merging writes into them
    return node


def writable(node) -> None:
    """``node`` and every section below it open to writes (a frozen dataclass makes read-only nodes)."""
    OmegaConf.set_readonly(node, None)
    if isinstance(node, DictConfig):
        for key in node:
            child = node._get_node(key)
            if isinstance(child, DictConfig):
                writable(child)


def _check_values(node: DictConfig, schema: type, prefix: str, skip: set[str] = frozenset()) -> None:
    """Every field present, and within its declared bounds; the nested schemas' fields too."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name in skip:
            continue
        key = f"{prefix}{f.name}"
        if OmegaConf.is_missing(node, f.name):
            raise ConfigError(f"config: {key}: missing; must be {requirement(hints[f.name], f)}")
        value = node[f.name]
        base, _ = optional_of(hints[f.name])
        if dataclasses.is_dataclass(base) and isinstance(value, DictConfig):
            _check_values(value, base, f"{key}.")
        elif violation(f, value):
            raise ConfigError(f"config: {wrong_value(key, value)}")


def _check_stage_overrides(values: dict, plugins: set[str]) -> None:
    """``cluster.stage_overrides`` names stages: a misspelt one would place nothing, in silence."""
    stages = {f.name for f in dataclasses.fields(RootConfig) if f.name in values and f.name not in GROUPS
              and dataclasses.is_dataclass(typing.get_type_hints(RootConfig)[f.name])} | plugins
    for name in (values.get("cluster") or {}).get("stage_overrides") or {}:
        if name not in stages:
            raise ConfigError(f"config: unknown config key 'cluster.stage_overrides.{name}' (not a stage of this "
                              f"config: {', '.join(sorted(stages))})")


_SEGMENT = re.compile(r"\[[^\]]*\]")


def _field_at(key: str) -> tuple[Any, dataclasses.Field] | None:
    """(type, field) of the schema field at ``key`` (``sft.path_replay.n``); an item of a list or a mapping field
    (``stages[0]``, ``eval.sets.hard``) is its field's. None outside the schema."""
    schema: Any = RootConfig
    found = None
    for name in _SEGMENT.sub("", key).split("."):
        if not dataclasses.is_dataclass(schema):
            return found  # inside a list or a mapping field
        f = next((f for f in dataclasses.fields(schema) if f.name == name), None)
        if f is None:
            return None
        hint = typing.get_type_hints(schema)[name]
        found = (hint, f)
        schema, _ = optional_of(hint)
    return found


def _schema_at(path: str) -> type | None:
    """The schema class of the section at ``path`` ("" is the root), or None when that is no schema's."""
    if not path:
        return RootConfig
    at = _field_at(path)
    if at is None:
        return None
    base, _ = optional_of(at[0])
    return base if dataclasses.is_dataclass(base) else None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__

"""Everything a stage may give the runner, in one place: ``StageSpec``.

A built-in stage module ends with ``STAGE = StageSpec(run=run, ...)``; ``parathink.stages.rl`` holds four, one per
GRPO-family stage. A plug-in stage (the config's ``stage_modules``) is a module that exports ``STAGE`` the same way,
or a ``module:attribute`` naming a ``StageSpec``; a module with only ``run(cfg, ctx)`` is ``StageSpec(run=run)``.
Only ``run`` is required; every other field has the default a stage gets when it says nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parathink.errors import ConfigError
from parathink.placement.roles import NO_MODEL, StageRole
from parathink.rundir.manifest import DEFAULT_SHARED_KEYS

if TYPE_CHECKING:
    from parathink.config.thresholds import GateThresholds
    from parathink.quality.expectations import Expectation
    from parathink.quality.gate import GateInput
    from parathink.stages.context import StageContext


@dataclass(frozen=True)
class Gate:
    """A stage's quality gate (docs/gates.md): ``check(cfg, out)`` judges the finished output before it is
    published; ``thresholds`` is the schema of its ``<stage>.gate`` section, checked before any stage starts."""

    check: Callable[[Any, GateInput], Iterable[Expectation]]
    thresholds: type[GateThresholds]


@dataclass(frozen=True)
class StageSpec:
    # Its work: writes into ctx.out_dir (published atomically on return), returns its metrics.
    run: Callable[[Any, StageContext], dict | None]
    # Raises ConfigError on a bad value of its section, before any stage of the run starts; None: nothing to check.
    validate: Callable[[Any], None] | None = None
    gate: Gate | None = None
    # Under a multi-process launch: True runs it on every process (each writes only on rank 0), False on rank 0
    # while the others wait (parathink.distributed).
    data_parallel: bool = False
    # The keys outside its own section that it reads: they enter its config hash (parathink.rundir.manifest).
    shared_keys: tuple[str, ...] = DEFAULT_SHARED_KEYS
    # Short overrides of `parathink stage NAME` (filter's input=...) rewritten before the config is composed.
    expand_overrides: Callable[[list[str]], list[str]] | None = None
    # What placement and the memory model need to know of it (which estimate, whether it trains, whether its gate
    # probes the model); the default holds no model.
    role: StageRole = NO_MODEL


def spec_of(obj: Any, name: str, target: str) -> StageSpec:
    """The ``StageSpec`` of what ``target`` (stage ``name``) loaded; ConfigError when it is none."""
    if isinstance(obj, StageSpec):
        return obj
    spec = getattr(obj, "STAGE", None)
    if isinstance(spec, StageSpec):
        return spec
    if not callable(getattr(obj, "run", None)):
        raise ConfigError(f"stage {name!r}: {target} has no run(cfg, ctx) function and no STAGE")
    if hasattr(obj, "gate"):  # a gate needs its thresholds' schema: only a StageSpec says both
        raise ConfigError(f"stage {name!r}: {target} defines gate but no STAGE; export "
                          f"STAGE = StageSpec(run=run, gate=Gate(gate, Thresholds)) (parathink.stages.contract)")
    return _from_names(obj)


def _from_names(module: Any) -> StageSpec:
    """A plug-in module that gives the same contract as module-level names instead of ``STAGE`` (the form stages had
    before ``StageSpec``; plug-ins written for it keep working): ``run``, ``validate``, ``DATA_PARALLEL``,
    ``SHARED_KEYS``, ``expand_overrides``. The only place these names are looked up."""
    return StageSpec(run=module.run, validate=getattr(module, "validate", None),
                     data_parallel=bool(getattr(module, "DATA_PARALLEL", False)),
                     shared_keys=tuple(getattr(module, "SHARED_KEYS", DEFAULT_SHARED_KEYS)),
                     expand_overrides=getattr(module, "expand_overrides", None))

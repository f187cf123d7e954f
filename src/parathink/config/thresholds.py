"""The schemas of the gates' thresholds (``<stage>.gate``, docs/gates.md), and their check before any stage starts.

A field's type says what a threshold must be (``float | None``: null switches that check off); ``rate`` and
``not_below`` add the bounds a type cannot say. No field has a default: the values live in
``hydra_conf/stage/<stage>.yaml``, once, and a missing one is refused. The stage schemas that have a ``gate`` field of
these types (every built-in stage: teacher, filter, eval, base, sft, the RL stages) refuse a wrong type or a misspelt
threshold while composing; ``check_thresholds`` checks every gate's section the same way, bounds included, before
any stage starts (one line, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import MISSING

from parathink.errors import ConfigError
from parathink.quality.gate import gate_section


@dataclass
class GateThresholds:
    """What every ``<stage>.gate`` section holds; each gate's schema extends it."""

    enabled: bool = MISSING  # false: the stage's output is published unjudged, with a warning


def rate() -> Any:
    """A threshold in [0, 1]."""
    return field(default=MISSING, metadata={"bounds": (0.0, 1.0)})


def not_below(low: float) -> Any:
    return field(default=MISSING, metadata={"bounds": (low, None)})


@dataclass
class TeacherThresholds(GateThresholds):
    """``teacher.gate`` (values in hydra_conf/stage/teacher.yaml)."""

    min_record_share: float = rate()  # problems with a non-empty response
    min_valid_rate: float = rate()  # raw traces in valid format
    data_docs: bool = MISSING  # great-expectations data docs (HTML) into teacher/_gates/data_docs


@dataclass
class FilterThresholds(GateThresholds):
    """``filter.gate`` (values in hydra_conf/stage/filter.yaml)."""

    min_valid_rate: float = rate()  # traces of `input` in valid format, when input names traces from outside the run
    min_accepted: int = not_below(0)  # accepted traces SFT needs at the very least
    data_docs: bool = MISSING


@dataclass
class BaseThresholds(GateThresholds):
    """``base.gate`` (values in hydra_conf/stage/base.yaml)."""

    min_accuracy: float = rate()  # probe accuracy floor
    probe: dict[str, Any] = MISSING  # the probe's problems and sampling (parathink.quality.probe.ProbeSpec)


@dataclass
class SFTThresholds(GateThresholds):
    """``sft.gate`` (values in hydra_conf/stage/sft.yaml)."""

    min_parallel_rate: float = rate()  # probe samples that are parallel
    min_valid_rate: float = rate()  # probe samples in valid format
    max_accuracy_drop: float | None = rate()  # below the start model's probe accuracy; null = off
    full_schedule: bool = MISSING  # steps == planned_steps
    probe: dict[str, Any] = MISSING


@dataclass
class RLThresholds(GateThresholds):
    """``<rl stage>.gate`` (values in hydra_conf/stage/rl.yaml, per stage in its own file)."""

    max_nonfinite_steps: int = not_below(0)  # steps skipped for a NaN loss or reward
    min_probe_reward: float | None = MISSING  # end-of-stage probe reward floor; null = off
    max_probe_reward_drop: float | None = not_below(0)  # end probe reward below the start's; null = off
    min_parallel_rate: float | None = rate()  # mean over the last `window` steps; null = off
    max_kl: float | None = not_below(0)  # mean KL to the reference over the last `window` steps; null = off
    window: int = not_below(1)


@dataclass
class EvalThresholds(GateThresholds):
    """``eval.gate`` (values in hydra_conf/stage/eval.yaml)."""

    min_models: int = not_below(1)  # models evaluated at the least


def check_thresholds(cfg, stage: str, schema: type[GateThresholds]) -> dict:
    """Validate ``<stage>.gate`` against ``schema`` (every field given, of its type, within its bounds); returns it.
    A stage whose own schema types its gate section has had the types checked while composing already."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    section = gate_section(cfg, stage)
    names = [f.name for f in fields(schema)]
    try:
        typed = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(schema), section))
    except ConfigKeyError as err:
        known = ", ".join(sorted(names))
        raise ConfigError(f"{stage}.gate.{err.full_key}: unknown threshold; known: {known}") from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"{stage}.gate.{err.full_key}: {_what(schema, err.full_key)}, got "
                          f"{section.get(err.full_key)!r}") from None
    for f in fields(schema):
        value = typed[f.name]
        if value == MISSING:
            raise ConfigError(f"{stage}.gate.{f.name}: missing (docs/gates.md lists every threshold)")
        low, high = f.metadata.get("bounds", (None, None))
        if value is not None and ((low is not None and value < low) or (high is not None and value > high)):
            raise ConfigError(f"{stage}.gate.{f.name}: {_what(schema, f.name)}, got {section[f.name]!r}")
    return section


def _what(schema: type[GateThresholds], name: str) -> str:
    """What a threshold must be, in words: ``must be a number in [0, 1] or null``."""
    f = next((f for f in fields(schema) if f.name == name), None)
    if f is None:
        return "unknown threshold"
    # The annotation as written: a string under `from __future__ import annotations`, else the type itself.
    written = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    kind = written.replace(" | None", "")
    low, high = f.metadata.get("bounds", (None, None))
    what = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(kind, "a mapping")
    if low is not None and high is not None:
        what += f" in [{low:g}, {high:g}]"
    elif low is not None:
        what += f" >= {low:g}"
    return f"must be {what}" + (" or null" if "None" in written else "")

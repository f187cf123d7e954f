"""What a stage's gate receives, and the checks on its thresholds that run before any stage starts.

A stage module opts into a gate with ``gate(cfg, out: GateInput) -> list[Expectation]``; the runner calls it on
the stage's finished output (``parathink.stages.gating``). Thresholds live in ``<stage>.gate.*``; each gate
declares their kinds in a ``KEYS`` mapping, and ``check_keys`` refuses a bad value in one line (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from parathink.errors import ConfigError


@dataclass
class GateInput:
    stage: str
    folder: Path  # the stage's output files, on local disk
    gate_dir: Path  # what the gate renders (data docs) goes here; published as <stage>/_gates
    metrics: dict[str, float]  # what the stage returned (its manifest's metrics)
    output_hash: str  # this output's content hash: the model's identity in the probe cache
    seed: int
    cache_dir: Path  # figures kept between evaluations (the probe of a start model)
    input_hash: Callable[[str], str | None]  # another stage's published output hash
    resolve_input: Callable[[str], Path]  # another stage's published output folder


# kind -> (test, what it must be); a trailing "?" in a KEYS entry also allows null
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "rate": (lambda v: _number(v) and 0.0 <= v <= 1.0, "a number in [0, 1]"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "positive_int": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
    "number": (lambda v: _number(v), "a number"),
    "non_negative": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "mapping": (lambda v: isinstance(v, Mapping), "a mapping"),
}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def gate_section(cfg, stage: str) -> dict:
    """``<stage>.gate`` as plain data; a missing section means no thresholds were configured (a ConfigError)."""
    from omegaconf import OmegaConf

    node = cfg[stage].get("gate") if stage in cfg else None
    if node is None:
        raise ConfigError(f"{stage}.gate: missing; the stage has a quality gate and needs its thresholds "
                          f"(hydra_conf/stage/{stage}.yaml, docs/gates.md), or {stage}.gate.enabled=false")
    data = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    if not isinstance(data, dict):
        raise ConfigError(f"{stage}.gate: must be a mapping, got {data!r}")
    return data


def check_keys(cfg, stage: str, kinds: Mapping[str, str]) -> dict:
    """Validate ``<stage>.gate`` against ``kinds`` (key -> kind, ``"rate?"`` allows null); returns it."""
    section = gate_section(cfg, stage)
    for key, kind in {"enabled": "bool", **kinds}.items():
        optional = kind.endswith("?")
        test, what = _KINDS[kind.rstrip("?")]
        if key not in section:
            raise ConfigError(f"{stage}.gate.{key}: missing (docs/gates.md lists every threshold)")
        value = section[key]
        if value is None and optional:
            continue
        if not test(value):
            raise ConfigError(f"{stage}.gate.{key}: must be {what}{' or null' if optional else ''}, got {value!r}")
    unknown = sorted(set(section) - set(kinds) - {"enabled"})
    if unknown:
        raise ConfigError(f"{stage}.gate.{unknown[0]}: unknown threshold; known: {', '.join(sorted(kinds))}")
    return section

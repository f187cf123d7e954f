"""What a stage's gate receives, and the checks on its thresholds that run before any stage starts.

A stage opts into a gate with ``stages/contract.py (Gate)``: ``check(cfg, out: GateInput) -> list[Expectation]``,
which the runner calls on the stage's finished output (``pipeline/gating.py``), and the dataclass of its
thresholds (``<stage>.gate.*``, ``parathink.config.thresholds``), checked before any stage starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

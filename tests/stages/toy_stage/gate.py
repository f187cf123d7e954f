"""The toy stage's gate: its published ``count.txt`` has at least ``toy.gate.min_lines`` lines."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from parathink.config.thresholds import GateThresholds
from parathink.quality.expectations import at_least
from parathink.quality.gate import gate_section


@dataclass
class Thresholds(GateThresholds):
    min_lines: int = MISSING


def toy_gate(cfg, out):
    g = gate_section(cfg, out.stage)
    lines = len((out.folder / "count.txt").read_text(encoding="utf-8").splitlines())
    return [at_least("lines", lines, g["min_lines"], "count.txt")]

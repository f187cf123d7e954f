"""The gate after ``base``: a held-out probe of the published model (``quality.probe``): the starting model answers,
probe accuracy at least ``min_accuracy`` (a broken or mismatched checkpoint scores ~0 and would waste the teacher
and everything after it)."""

from __future__ import annotations

from parathink.quality.expectations import Expectation, at_least
from parathink.quality.gate import GateInput, gate_section
from parathink.quality.probe import ProbeSpec, probe_model, stage_model


def base_gate(cfg, out: GateInput) -> list[Expectation]:
    g = gate_section(cfg, "base")
    spec = ProbeSpec.from_cfg(g["probe"], "base.gate.probe")
    figures, note = probe_model(out.folder / "model", stage_model("base", out.output_hash), spec, cfg, out)
    return [at_least("probe_accuracy", figures["accuracy"], g["min_accuracy"], note)]

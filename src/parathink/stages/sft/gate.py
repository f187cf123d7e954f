"""The gate after ``sft``: a held-out probe of the published model (``quality.probe``). The cold-start model has
learnt the format (probe parallel rate and valid-format rate at least their thresholds) without losing the start
model's skill (probe accuracy at most ``max_accuracy_drop`` below the start's, sampled on the same problems with the
same draws), and its schedule ran to the end (``steps == planned_steps``: a wall-clock cap that cuts the cosine
schedule leaves an undertrained model; the run that motivated this gate stopped at 52 of 204 steps with 1.4%
parallel samples).
"""

from __future__ import annotations

from pathlib import Path

from parathink.quality.expectations import Expectation, at_least, equals, not_applicable
from parathink.quality.gate import GateInput, gate_section
from parathink.quality.probe import ProbeSpec, folder_fingerprint, probe_model, stage_model


def _start_model(cfg, out: GateInput) -> tuple[Path | str, str, str]:
    """(where the model SFT started from is, its identity, its name for the table)."""
    from parathink.config.sft import start_stage
    from parathink.modeling import resolve_source

    stage = start_stage(cfg)
    if stage is not None:
        return out.resolve_input(stage) / "model", stage_model(stage, out.input_hash(stage)), stage
    source = resolve_source(str(cfg.sft.init))
    identity = folder_fingerprint(source) if isinstance(source, Path) else str(source)
    return source, f"source:{cfg.sft.init}:{identity}", str(cfg.sft.init)


def _schedule(out: GateInput) -> Expectation:
    steps, planned = out.metrics.get("steps"), out.metrics.get("planned_steps")
    if steps is None or planned is None:
        return not_applicable("steps", "the stage recorded no planned_steps")
    cut = int(steps) != int(planned)
    return equals("steps", int(steps), int(planned), "sft.max_minutes cut the schedule; 0 = no cap" if cut else "")


def sft_gate(cfg, out: GateInput) -> list[Expectation]:
    g = gate_section(cfg, "sft")
    spec = ProbeSpec.from_cfg(g["probe"], "sft.gate.probe")
    checks = [_schedule(out) if g["full_schedule"] else not_applicable("steps", "sft.gate.full_schedule=false")]
    figures, note = probe_model(out.folder / "model", stage_model("sft", out.output_hash), spec, cfg, out)
    checks += [at_least("probe_parallel_rate", figures["parallel_rate"], g["min_parallel_rate"], note),
               at_least("probe_valid_rate", figures["valid_rate"], g["min_valid_rate"], note)]
    if g["max_accuracy_drop"] is None:
        return checks + [not_applicable("probe_accuracy", "sft.gate.max_accuracy_drop=null")]
    start_dir, start_id, start_name = _start_model(cfg, out)
    start, start_note = probe_model(start_dir, start_id, spec, cfg, out)
    floor = start["accuracy"] - g["max_accuracy_drop"]
    return checks + [at_least("probe_accuracy", figures["accuracy"], round(floor, 6),
                              f"{start_name} {start['accuracy']:.3f} - {g['max_accuracy_drop']} ({start_note})")]

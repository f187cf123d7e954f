"""``resume_stage`` with a quality gate, for the runner's gate tests (plugged in through ``stage_modules``).

The gate reads the stage's published ``value.txt``: it must reach ``gate.min_value``. ``gate.crash: true`` makes the
gate itself raise, as a probe that runs out of memory would.
"""

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from omegaconf import MISSING

from parathink.config.thresholds import GateThresholds
from parathink.quality.expectations import at_least, not_applicable
from parathink.quality.gate import gate_section
from parathink.stages.contract import Gate, StageSpec

_spec = importlib.util.spec_from_file_location("resume_stage_for_gates", Path(__file__).with_name("resume_stage.py"))
_stage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stage)



def gate(cfg, out):
    g = gate_section(cfg, out.stage)
    if g["crash"]:
        raise RuntimeError("the gate's probe ran out of memory")
    value = int((out.folder / "value.txt").read_text())
    return [at_least("value", value, g["min_value"], "value.txt"), not_applicable("kl", "no reference model")]


@dataclass
class Thresholds(GateThresholds):
    min_value: float = MISSING
    crash: bool = MISSING


STAGE = StageSpec(run=_stage.run, validate=_stage.validate, gate=Gate(gate, Thresholds))

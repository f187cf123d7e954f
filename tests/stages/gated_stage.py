"""``resume_stage`` with a quality gate, for the runner's gate tests (plugged in through ``stage_modules``).

The gate reads the stage's published ``value.txt``: it must reach ``gate.min_value``. ``gate.crash: true`` makes the
gate itself raise, as a probe that runs out of memory would.
"""

import importlib.util
from pathlib import Path

from parathink.quality.expectations import at_least, not_applicable
from parathink.quality.gate import gate_section

_spec = importlib.util.spec_from_file_location("resume_stage_for_gates", Path(__file__).with_name("resume_stage.py"))
_stage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stage)

run, validate = _stage.run, _stage.validate
GATE_KEYS = {"min_value": "number", "crash": "bool"}


def gate(cfg, out):
    g = gate_section(cfg, out.stage)
    if g["crash"]:
        raise RuntimeError("the gate's probe ran out of memory")
    value = int((out.folder / "value.txt").read_text())
    return [at_least("value", value, g["min_value"], "value.txt"), not_applicable("kl", "no reference model")]

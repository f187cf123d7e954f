"""``rank_stage`` declared data-parallel: the runner runs it on every process."""

import importlib.util
from pathlib import Path

from parathink.stages.contract import StageSpec

_spec = importlib.util.spec_from_file_location("rank_stage", Path(__file__).with_name("rank_stage.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

STAGE = StageSpec(run=_module.run, data_parallel=True)

"""A whole stage in one folder, as a new built-in stage is laid out (``parathink.stages.<name>/``): its run, its
section's check, its gate (``gate.py``, with the thresholds' schema) and its role for placement. Plugged in with one
line, ``stage_modules.toy=<this folder>``; ``tests/stages/test_stage_folder.py`` runs it.

It writes ``count.txt`` (``toy.count`` lines of ``toy.word``) and reports ``lines``.
"""

from __future__ import annotations

from parathink.errors import ConfigError
from parathink.placement.roles import StageRole
from parathink.stages.contract import Gate, StageSpec

from .gate import Thresholds, toy_gate


def validate(cfg) -> None:
    count = cfg.toy.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigError(f"toy.count: a whole number >= 0, got {count!r}")


def run(cfg, ctx) -> dict:
    lines = [str(cfg.toy.word)] * int(cfg.toy.count)
    (ctx.out_dir / "count.txt").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return {"lines": len(lines)}


# It loads the run's model (to probe it, say): placement sizes it by the model's weights.
STAGE = StageSpec(run=run, validate=validate, gate=Gate(toy_gate, Thresholds), role=StageRole(memory="weights"))

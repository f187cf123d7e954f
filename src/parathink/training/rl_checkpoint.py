"""Resumable RL checkpoints in the stage's work dir: policy, optimiser, scheduler, RNG, step.

Written through accelerate's ``save_state`` (so a DeepSpeed or FSDP run shards it the way it shards training)
into a temporary folder that is renamed into place: a kill while saving leaves the previous checkpoint intact.
The step is what resumes the reward schedule (``scaffold`` switches at a step) and the problem order
(``rl_rollouts.problems_for_step`` is a pure function of the step), so a resumed run repeats exactly what the
uninterrupted run would have done.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from parathink import distributed

NAME = "checkpoint"
STATE = "trainer_state.json"


def save(accelerator, work_dir: Path, step: int, extra: dict) -> Path:
    """Every process calls this (each writes its RNG state, DeepSpeed its shards); rank 0 alone prepares and
    swaps. Ranks come from the launch's process group: accelerate reports one process under DeepSpeed on CPU."""
    procs = distributed.group()
    final = Path(work_dir) / NAME
    tmp = final.with_name(NAME + ".tmp")
    if procs.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    procs.barrier()
    accelerator.save_state(str(tmp))
    procs.barrier()
    if procs.is_main:
        (tmp / STATE).write_text(json.dumps({"step": step, **extra}), encoding="utf-8")
        old = final.with_name(NAME + ".old")
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        if old.exists():
            shutil.rmtree(old)
    procs.barrier()
    return final


def latest(work_dir: Path) -> Path | None:
    """The checkpoint to resume from, if a complete one exists (a ``.old`` one survives a kill mid-swap)."""
    for name in (NAME, NAME + ".old"):
        path = Path(work_dir) / name
        if (path / STATE).exists():
            return path
    return None


def load(accelerator, path: Path) -> dict:
    accelerator.load_state(str(path))
    return json.loads((Path(path) / STATE).read_text(encoding="utf-8"))

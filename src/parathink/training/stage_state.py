"""Training stages that follow each other in one process (``parathink run``: sft, then each RL stage of
the curriculum, each under DeepSpeed on the GPU experiments).

accelerate keeps its state in process-wide singletons (``PartialState``, ``AcceleratorState``, ``GradientState``):
the first stage's Trainer or Accelerator fixes the DeepSpeed plugin for the life of the process, and the next stage's
``Accelerator(deepspeed_plugin=...)`` fails with "You cannot pass in a deepspeed_plugin when creating a second
Accelerator". transformers keeps a module-level reference to the DeepSpeed config (after a ZeRO-3 stage every model
loaded later would be built partitioned), and both leave ``ACCELERATE_USE_DEEPSPEED`` and friends in the environment,
where a later stage without DeepSpeed would read them.

Chosen: a reset between stages in the same process, not a fresh process per stage. The process group (torchrun's
ranks, DeepSpeed's communicator) survives the reset and is reused, so a chain costs no new rendezvous and no second
import of torch/DeepSpeed (seconds on a GPU node, ~10 s a stage on the CPU rehearsal's 2 ranks); the runner, the
lock, the tracker's parent run and ``parathink stage`` stay as they are; and a stage's objects are local to its
``run``, so once it returns they are garbage that the reset collects before the device cache is emptied. What a
fresh process would add (a guarantee against a leak we do not know of) the chain test checks instead: no DeepSpeed
engine is alive after a stage (tests/training/test_stage_chain.py).
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable
from typing import Any

# What accelerate and transformers write into the environment when a stage configures them (accelerate launch's own
# settings are there before the stage and are restored as they were).
_ENV_PREFIXES = ("ACCELERATE_",)


def reset_training_state() -> None:
    """Forget accelerate's and transformers' process-wide training state and free what the last stage left: its
    engine, model and optimiser are unreachable once its ``run`` returned; collected here, then the CUDA cache is
    emptied so that the next stage (or the vLLM teacher, a separate process) can have the memory. The process group
    is kept: the next stage's Accelerator joins the same one."""
    try:
        from accelerate.state import AcceleratorState, GradientState
    except ImportError:  # an orchestrator image without the training extras: nothing was configured
        return
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    try:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()  # after ZeRO-3, every later from_pretrained would be built partitioned
    except ImportError:
        pass
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def free_accelerator(accelerator) -> None:
    """Destroy the DeepSpeed engine ``accelerator`` prepared and drop its references to models and optimisers. ZeRO's
    optimiser hooks every parameter's gradient accumulator (references held in C++, which the garbage collector
    cannot follow), so without this the engine, its model and its fp32 partitions outlive the stage."""
    if accelerator is not None:
        accelerator.free_memory()


def _accelerate_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def _restore_env(before: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith(_ENV_PREFIXES) and k not in before]:
        del os.environ[key]
    os.environ.update(before)


def own_training_state(run: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a training stage's ``run``: it starts from a clean accelerate/DeepSpeed state and leaves none behind (the
    reset after it comes once its frame, and so its model, optimiser and engine, is gone)."""

    @functools.wraps(run)
    def wrapped(*args, **kwargs):
        before = _accelerate_env()
        reset_training_state()
        try:
            return run(*args, **kwargs)
        finally:
            _restore_env(before)
            reset_training_state()

    return wrapped

"""What the runner and the RL loop need from a multi-process launch (torchrun, ``accelerate launch``).

A launcher starts one process per device and tells each its place through the environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``). The runner joins the processes into one group before any stage, so that rank 0
alone decides what to skip, writes manifests and tracks, while the stages that can use every process
(``StageSpec(data_parallel=True)``, parathink.stages.contract) run on all of them and the others run on rank 0
while the rest wait.

``Group`` is the small set of collectives the callers need, over a gloo group on the CPU (control messages and a
few floats per step: never the hot path). In one process every method is the identity, so the single-process
code reads exactly like the multi-process one and pays nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# Rank 0 may run a stage that is not data-parallel (eval, the teacher) for hours while the others wait in a
# barrier: the control group's timeout has to outlast that, unlike torch's 30-minute default.
CONTROL_TIMEOUT = timedelta(hours=48)


def world_size() -> int:
    """Processes in this launch, from the launcher's environment (1 when not launched by one)."""
    raw = os.environ.get("WORLD_SIZE", "1").strip() or "1"
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE={raw!r} is not an integer") from None


def rank() -> int:
    return int(os.environ.get("RANK", "0").strip() or "0")


def device() -> str:
    """This process's device: its launcher-assigned GPU (``LOCAL_RANK``), or the CPU when there is none."""
    import torch

    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0)}" if torch.cuda.is_available() else "cpu"


def device_memory() -> int | None:
    """This process's GPU memory in bytes; None on a CPU (an engine's KV cache then takes the call's worst case)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.device(device())).total_memory


@dataclass
class Group:
    """Collectives over the launch's processes; the identity in one process."""

    rank: int = 0
    size: int = 1
    handle: Any = None  # torch.distributed ProcessGroup (gloo) when size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier(group=self.handle)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.handle)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.handle)
        return out

    def sums(self, *values: float) -> tuple[float, ...]:
        """Each of ``values`` summed over the processes, in one exchange."""
        parts = self.gather(tuple(float(v) for v in values))
        return tuple(float(sum(col)) for col in zip(*parts))

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on one: keeps the ranks' control flow identical."""
        return bool(any(self.gather(bool(flag))))


_GROUP: Group | None = None


def group() -> Group:
    """This launch's group; joins the processes on first use (every rank must reach the first call)."""
    global _GROUP
    if _GROUP is not None:
        return _GROUP
    size = world_size()
    if size == 1:
        _GROUP = Group()
        return _GROUP
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        # The default group carries training's collectives (accelerate and the Trainer reuse it): NCCL on GPUs.
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    _GROUP = Group(rank=dist.get_rank(), size=dist.get_world_size(),
                   handle=dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT))
    import atexit
    import sys

    atexit.register(finish)  # whoever joined (the runner, or train() called directly) leaves together...
    previous_hook = sys.excepthook

    def leave_alone_on_error(*exc_info):  # ...unless it is dying of an uncaught exception: see abandon()
        abandon()
        previous_hook(*exc_info)

    sys.excepthook = leave_alone_on_error
    return _GROUP


def finish() -> None:
    """Leave the launch's group once every process is done: a process that exits while the others still talk
    (all stages skipped: its part ends at once) aborts in gloo's teardown otherwise."""
    global _GROUP
    if _GROUP is None or _GROUP.size == 1:
        return
    import torch.distributed as dist

    _GROUP.barrier()
    dist.destroy_process_group()
    _GROUP = None


def abandon() -> None:
    """A failing process leaves without waiting for the others: they may be inside a collective it will never
    join, so a closing barrier would hang it (and the launch) forever; torchrun stops them once it exits."""
    global _GROUP
    _GROUP = None

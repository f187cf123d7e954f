"""Peak resident memory, per stage.

``parathink run`` executes every stage in one process, and the kernel's peak (``ru_maxrss``) only ever grows, so
without a reset a stage would report the largest peak of any stage before it. On Linux the runner resets the
process's high-water mark (``/proc/self/clear_refs``) as each stage starts and reads ``VmHWM`` when it ends;
elsewhere ``reset_peak`` returns False and the figure is the process's peak so far.

Device memory (``DevicePeak``): the peak of the stage's live tensor bytes, recorded in its ``_timings.json`` beside
the estimate ``parathink plan`` printed for it (``memory_model``), and compared by ``over_estimate``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak() -> bool:
    """Start a new high-water mark (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")  # "5": reset the peak resident set size (proc(5))
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident memory since the last reset (or since the process started), in MiB."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
        if found:
            return int(found.group(1)) / 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KB on Linux


# ------------------------------------------------------------------------ device memory: a stage's tensors

GIB = 2**30


def measures_cpu(setting: bool | None) -> bool:
    """Whether a stage's peak is measured on a CPU: ``PARATHINK_CPU_PEAK=1`` / ``0`` decides when set; else the
    root setting ``measure_device_memory`` (true: measured; null, the default, and false: not). The profiler the
    CPU figure needs costs ~7 us an allocation (up to ~2.5x on an allocation-bound tiny decode loop: the demo's
    and the tests' stages), so only the rehearsal (``scale=cpu``) asks for it."""
    env = os.environ.get("PARATHINK_CPU_PEAK", "")
    if env in ("0", "1"):
        return env == "1"
    return setting is True


class DevicePeak:
    """The peak of live tensor bytes while a stage runs: ``torch.cuda.max_memory_allocated`` on a GPU (reset at
    the start) unless ``measure`` is false; on a CPU, where ``measures_cpu(measure)``, PyTorch's own allocator
    accounting, the profiler's memory events (``profile_memory``: every storage allocated and freed, as
    ``benchmarks/memory_check.py`` measures), summed in time order. Tensors that existed before the stage started
    are not in the CPU figure (their frees are not counted either).

    ``measure``: the root setting ``measure_device_memory`` (null: a GPU's only; true: a CPU's too; false: none).
    ``measured_by`` names the method; ``none`` where nothing was measured (not asked for, a profiler already
    running), and the peak is then null."""

    def __init__(self, measure: bool | None = None):
        self.peak: int | None = None
        self.measured_by = "none"
        self.measure = measure
        self._profiling = False

    def __enter__(self) -> DevicePeak:
        import torch

        if self.measure is False and os.environ.get("PARATHINK_CPU_PEAK") != "1":
            return self
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
            self.measured_by = "cuda.max_memory_allocated"
            return self
        if not measures_cpu(self.measure):  # not asked for: the profiler's cost is not paid
            return self
        from torch.autograd import _enable_profiler, _prepare_profiler
        from torch.profiler import ProfilerActivity, RecordScope

        try:
            _prepare_profiler(self._config(), {ProfilerActivity.CPU})
            # only user scopes get the profiler's per-op callbacks: the ops themselves are not recorded, their
            # allocations are (what this measures), at a fraction of a full profile's cost
            _enable_profiler(self._config(), {ProfilerActivity.CPU}, {RecordScope.USER_SCOPE})
        except RuntimeError:  # a profiler is already on (a benchmark measuring the stage itself)
            return self
        self._profiling, self.measured_by = True, "cpu.live_tensors"
        return self

    @staticmethod
    def _config():
        from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig

        # no shapes, no stacks, no FLOPs, no modules: memory events and the ops' names only
        return ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig())

    def __exit__(self, *exc) -> None:
        import torch

        if self.measured_by == "cuda.max_memory_allocated":
            self.peak = int(torch.cuda.max_memory_allocated())
        elif self._profiling:
            from torch.autograd import _disable_profiler

            self.peak = live_peak(cpu_allocations(_disable_profiler()))

    def record(self, estimate_bytes: int | None) -> dict:
        """The ``device_memory`` section of ``_timings.json``: the estimate ``plan`` printed and the peak."""
        return {"estimate_gib": None if estimate_bytes is None else round(estimate_bytes / GIB, 6),
                "estimate_bytes": estimate_bytes,
                "peak_gib": None if self.peak is None else round(self.peak / GIB, 6), "peak_bytes": self.peak,
                "measured_by": self.measured_by}


def cpu_allocations(result) -> list[tuple[int, int, int]]:
    """(time ns, bytes: + allocated / - freed, address) of every CPU storage event in a profiler result, from its
    event tree (the flat event list carries no address)."""
    from torch._C._profiler import _EventType

    out, stack = [], list(result.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            fields = node.extra_fields
            if fields.device.type == "cpu":
                out.append((node.start_time_ns, fields.alloc_size, fields.ptr))
        else:
            stack.extend(node.children)
    return out


def live_peak(events) -> int:
    """The peak of live bytes over ``events`` (time, +/- bytes, address), in time order (a free first at a tie).

    The profiler records a free only on a thread it follows: a tensor whose last reference another thread drops
    (gloo's worker, done with DeepSpeed's flattened bucket) is freed unrecorded, and a plain running sum counts it
    live to the end (the rehearsal's RL peaks varied by multiples of that 2,104,832 B bucket from run to run). The
    allocator hands out only free addresses, so an allocation at an address still live marks the earlier tensor
    freed. A free with no allocation seen (a tensor made before the stage) lowers the total, as the sum did."""
    live: dict[int, int] = {}
    running = peak = 0
    for _, nbytes, ptr in sorted(events, key=lambda e: (e[0], e[1])):
        if nbytes > 0:
            running += nbytes - live.pop(ptr, 0)
            live[ptr] = nbytes
        else:
            running -= live.pop(ptr, -nbytes)
        peak = max(peak, running)
    return peak


def over_estimate(stage_dir, name: str | None = None) -> str | None:
    """One line when the stage published in ``stage_dir`` (a folder or ``s3://`` prefix) peaked above its estimate,
    or recorded no figures to compare; None when its peak is within its estimate or it holds no model (no
    estimate). The rehearsal's check (docs/gpu.md, "Memory ledger")."""
    from parathink.rundir import timings

    name = name or str(stage_dir).rstrip("/").rsplit("/", 1)[-1]
    record = timings.read(stage_dir).get("device_memory")
    if not isinstance(record, dict):
        return f"stage {name}: no device_memory in its _timings.json"
    estimate, peak = record.get("estimate_bytes"), record.get("peak_bytes")
    if estimate is None:
        return None
    if peak is None:
        return f"stage {name}: device_memory has no measured peak ({record.get('measured_by')})"
    if peak > estimate:
        return (f"stage {name}: peak {peak / GIB:.4f} GiB ({peak:,} bytes, {record.get('measured_by')}) exceeds its "
                f"estimate {estimate / GIB:.4f} GiB ({estimate:,} bytes)")
    return None


def check_run(run_dir, stages) -> list[str]:
    """``over_estimate`` of each of ``stages`` under ``run_dir``: [] when every peak is within its estimate."""
    from parathink import storage

    return [line for name in stages if (line := over_estimate(storage.join(str(run_dir), name), name))]

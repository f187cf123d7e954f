"""How many CPU threads this process may really use, for torch's intra-op pool and OpenMP.

A pod sees every core of its node (``os.cpu_count()`` says 64 on a 64-core node) but may use only its CPU limit,
which the kernel enforces as a CFS quota on the pod's cgroup; a process may also be pinned to fewer cores
(``taskset``, a CPU manager's exclusive cores). More threads than that do not run in parallel: they wait at
every barrier of a parallel region for one that the quota has put to sleep, and a step that takes milliseconds
alone takes the scheduler's period (100 ms) instead. So the count is the smallest of the affinity mask and the
quota of every cgroup from the process's own up to the root (cgroup v2 ``cpu.max``; v1 ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us``), rounded up. ``OMP_NUM_THREADS``, when set, wins: it is the user's explicit choice.

The same waits decide what happens when other processes share the cores: OpenMP's threads spin at each barrier
before they sleep (GNU OpenMP: 300,000 iterations), and a spinning thread holds the core that the thread it waits
for needs. Passive waiting (``OMP_WAIT_POLICY=PASSIVE``) sleeps at once; ``make bench`` (bench_sft.py's contended
case) measures both sides of that trade.

No torch here: the count is set in the environment before torch is imported (:func:`configure`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _v2_quota(root: Path, rel: str) -> float | None:
    """The tightest ``cpu.max`` from the process's cgroup up to the root, in CPUs; None when unlimited."""
    best = None
    path = root / rel.lstrip("/")
    while True:
        f = path / "cpu.max"
        if f.is_file():
            quota, _, period = f.read_text().strip().partition(" ")
            if quota != "max" and period:
                cpus = int(quota) / int(period)
                best = cpus if best is None else min(best, cpus)
        if path == root or root not in path.parents:
            return best
        path = path.parent


def _v1_quota(root: Path, rel: str) -> float | None:
    best = None
    for controller in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        base = root / controller
        if not base.is_dir():
            continue
        path = base / rel.lstrip("/")
        while True:
            q, p = path / "cpu.cfs_quota_us", path / "cpu.cfs_period_us"
            if q.is_file() and p.is_file() and int(q.read_text()) > 0:
                cpus = int(q.read_text()) / int(p.read_text())
                best = cpus if best is None else min(best, cpus)
            if path == base or base not in path.parents:
                break
            path = path.parent
    return best


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU limit the kernel enforces on this process, in CPUs (1.5 = a 150 ms quota per 100 ms period)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # cgroup v2's single hierarchy: "0::/kubepods/pod.../container..."
            quota = _v2_quota(root, rel)
            if quota is not None:
                return quota
        elif "cpu" in controllers.split(","):
            quota = _v1_quota(root, rel)
            if quota is not None:
                return quota
    return None


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """min(cores this process may run on, its cgroup CPU quota rounded up), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def default_threads() -> int:
    """``OMP_NUM_THREADS`` when the user set it, else :func:`usable_cpus`."""
    explicit = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(explicit) if explicit.isdigit() and int(explicit) > 0 else usable_cpus()


def configure() -> int:
    """Put the count (and passive waiting) in the environment before torch or numpy's BLAS start their pools, so
    that torch's default, OpenMP, MKL and every child process (DataLoader workers, torchrun's ranks) agree. A value
    the user set is kept. Returns the count."""
    n = default_threads()
    for var, value in (("OMP_NUM_THREADS", str(n)), ("MKL_NUM_THREADS", str(n)), ("OMP_WAIT_POLICY", "PASSIVE")):
        os.environ.setdefault(var, value)
    return n

"""parathink.threads: a pod's CPU limit (cgroup v2 cpu.max, v1 CFS quota) and affinity, not the node's core count,
size torch's threads. The cgroup files are written as the kernel lays them out; affinity is the real kernel's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parathink import threads


def v2_tree(tmp_path: Path, quotas: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, value in quotas.items():
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "cpu.max").write_text(value + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    (root / "kubepods/pod1/ctr").mkdir(parents=True, exist_ok=True)
    return root, proc


def test_v2_quota_of_the_tightest_ancestor(tmp_path):
    root, proc = v2_tree(tmp_path, {"kubepods": "max 100000", "kubepods/pod1": "150000 100000",
                                    "kubepods/pod1/ctr": "max 100000"})
    assert threads.cgroup_cpu_quota(root, proc) == 1.5


def test_v2_unlimited_is_none(tmp_path):
    root, proc = v2_tree(tmp_path, {"kubepods/pod1/ctr": "max 100000"})
    assert threads.cgroup_cpu_quota(root, proc) is None


def test_v1_cfs_quota(tmp_path):
    base = tmp_path / "cgroup" / "cpu,cpuacct" / "kubepods" / "pod1"
    base.mkdir(parents=True)
    (base / "cpu.cfs_quota_us").write_text("50000\n")
    (base / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1\n0::/\n")
    assert threads.cgroup_cpu_quota(tmp_path / "cgroup", proc) == 0.5
    assert threads.usable_cpus(tmp_path / "cgroup", proc) == 1  # half a CPU still runs one thread


def test_quota_caps_the_affinity(tmp_path):
    root, proc = v2_tree(tmp_path, {"kubepods/pod1": "100000 100000"})
    assert threads.usable_cpus(root, proc) == 1 <= len(os.sched_getaffinity(0))


def test_explicit_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert threads.default_threads() == threads.usable_cpus()


CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
TORCH_THREADS = "import torch; print('threads', torch.get_num_threads())"
ENTRY_THEN_TORCH = ("import contextlib, io; from parathink import cli\n"
                    "with contextlib.redirect_stdout(io.StringIO()): cli.main(['plan', 'experiment=tiny'])\n"
                    + TORCH_THREADS)


@pytest.fixture
def one_cpu_cgroup():
    """A real cgroup (v1 cpu controller) with a CFS quota of one CPU, as the kubelet makes for `limits.cpu: 1`."""
    group = CGROUP_V1_CPU / f"parathink-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")
    except OSError as e:
        if os.environ.get("CI", "").lower() in ("1", "true") and CGROUP_V1_CPU.is_dir():
            pytest.fail(f"cannot make a cgroup under {CGROUP_V1_CPU}: {e}")
        pytest.skip(f"no writable cgroup v1 cpu controller here ({e})")
    yield group
    group.rmdir()


def in_cgroup(group: Path, code: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    argv = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" -c "$1"', sys.executable, code]
    out = subprocess.run(argv, capture_output=True, text=True, env={**env, "CI": "true"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split("threads")[-1])


@pytest.mark.slow  # two interpreters that import torch
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the quota must be below the affinity: needs 2 cores")
def test_parathink_in_a_one_cpu_pod_runs_torch_on_one_thread(one_cpu_cgroup):
    """torch alone sizes its pool from the affinity (every core of the node); through `parathink` it respects the
    quota."""
    assert in_cgroup(one_cpu_cgroup, TORCH_THREADS) == len(os.sched_getaffinity(0))
    assert in_cgroup(one_cpu_cgroup, ENTRY_THEN_TORCH) == 1

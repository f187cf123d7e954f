"""parathink.memory: a stage's peak, not the largest peak of the process's earlier stages."""

import re
import sys
from pathlib import Path

import pytest

from parathink import memory

MB = 1024 * 1024


def resident_mb() -> float:
    """What the process holds now (the suite may already hold hundreds of MiB)."""
    return int(re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)[1]) / 1024


def touched(mib: int) -> bytearray:
    block = bytearray(mib * MB)
    block[::4096] = b"x" * len(block[::4096])  # every page written: resident, not just reserved
    return block


@pytest.mark.skipif(sys.platform != "linux", reason="the high-water mark can be reset on Linux only")
def test_the_peak_is_reset_per_stage():
    before = resident_mb()
    block = touched(300)
    assert memory.peak_rss_mb() >= before + 290
    del block
    assert memory.reset_peak()
    assert memory.peak_rss_mb() < resident_mb() + 50  # the 300 MiB freed above no longer counts
    start = resident_mb()
    block = touched(100)
    after = memory.peak_rss_mb()
    assert after >= start + 95
    del block
    assert memory.peak_rss_mb() > after - 1  # freeing does not lower a peak (to the kernel's accounting): a reset does

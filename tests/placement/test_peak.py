"""parathink.placement.peak: a stage's peak, not the largest peak of the process's earlier stages."""

import mmap
import re
import sys
from pathlib import Path

import pytest

from parathink.placement import peak as memory

MB = 1024 * 1024


def resident_mb() -> float:
    """What the process holds now (the suite may already hold hundreds of MiB)."""
    return int(re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)[1]) / 1024


def touched(mib: int) -> mmap.mmap:
    # A fresh anonymous mapping, not a bytearray: malloc may hand back heap pages the suite already made resident
    # (CI saw a 100 MiB bytearray leave the resident set unchanged), while new mapped pages must fault in.
    block = mmap.mmap(-1, mib * MB)
    for offset in range(0, mib * MB, 4096):
        block[offset] = 1  # every page written: resident, not just reserved
    return block


@pytest.mark.skipif(sys.platform != "linux", reason="the high-water mark can be reset on Linux only")
def test_the_peak_is_reset_per_stage():
    before = resident_mb()
    block = touched(300)
    assert memory.peak_rss_mb() >= before + 290
    block.close()
    assert memory.reset_peak()
    assert memory.peak_rss_mb() < resident_mb() + 50  # the 300 MiB freed above no longer counts
    start = resident_mb()
    block = touched(100)
    after = memory.peak_rss_mb()
    assert after >= start + 95
    block.close()
    assert memory.peak_rss_mb() > after - 1  # freeing does not lower a peak (to the kernel's accounting): a reset does

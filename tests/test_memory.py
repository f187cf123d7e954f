"""parathink.memory: a stage's peak, not the largest peak of the process's earlier stages."""

import sys

import pytest

from parathink import memory


@pytest.mark.skipif(sys.platform != "linux", reason="the high-water mark can be reset on Linux only")
def test_the_peak_is_reset_per_stage():
    block = bytearray(300 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not just reserved
    assert memory.peak_rss_mb() >= 300
    del block
    assert memory.reset_peak() and memory.peak_is_per_stage()
    assert memory.peak_rss_mb() < 300  # the 300 MiB freed above no longer counts
    block = bytearray(100 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    after = memory.peak_rss_mb()
    assert after >= 100
    del block
    assert memory.peak_rss_mb() > after - 1  # freeing does not lower a peak (to the kernel's accounting): a reset does

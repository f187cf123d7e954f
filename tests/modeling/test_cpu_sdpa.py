"""Half-precision SDPA on any CPU kernel family (parathink.modeling.cpu_sdpa)."""

import os
import subprocess
import sys

import pytest
import torch

from parathink.modeling import cpu_sdpa

CHILD = """
import torch
from parathink.modeling.cpu_sdpa import ensure_cpu_sdpa
found = ensure_cpu_sdpa()
q, k, v = (torch.randn(2, 4, 300, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
got = torch.nn.functional.scaled_dot_product_attention(*(t.bfloat16() for t in (q, k, v)), is_causal=True)
print((got.float() - want).abs().max().item(), found)
"""


def test_bf16_attention_runs_under_the_lowest_kernel_family():
    """ATEN_CPU_CAPABILITY=default on an AMX / AVX512-BF16 CPU made torch's flash kernel raise (pack_vnni2); after
    ensure_cpu_sdpa a bf16 call of 300 tokens runs and matches fp32 to bf16's precision, on whatever CPU this is."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    error = float(out.stdout.split()[0])
    assert error < 0.05, out.stdout


@pytest.fixture
def fresh_probe():
    """ensure_cpu_sdpa as in a new process, and the global flash flag as it was afterwards."""
    cpu_sdpa.ensure_cpu_sdpa.cache_clear()
    before = torch.backends.cuda.flash_sdp_enabled()
    yield
    torch.backends.cuda.enable_flash_sdp(before)
    cpu_sdpa.ensure_cpu_sdpa.cache_clear()


def test_a_failing_flash_kernel_turns_the_backend_off(monkeypatch, fresh_probe):
    """Stand-in for the torch failure: probe_error reports it for the first probe only (the math backend then runs)."""
    answers = iter(["pack_vnni2 is only supported when avx512 is supported", None])
    monkeypatch.setattr(cpu_sdpa, "probe_error", lambda dtype: next(answers))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    found = cpu_sdpa.ensure_cpu_sdpa()
    assert "pack_vnni2" in found and "torch.bfloat16" in found
    assert not torch.backends.cuda.flash_sdp_enabled()


def test_a_working_kernel_is_left_alone(monkeypatch, fresh_probe):
    monkeypatch.setattr(cpu_sdpa, "probe_error", lambda dtype: None)
    torch.backends.cuda.enable_flash_sdp(True)
    assert cpu_sdpa.ensure_cpu_sdpa() is None
    assert torch.backends.cuda.flash_sdp_enabled()

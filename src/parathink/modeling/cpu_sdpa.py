"""Half-precision attention on CPUs where torch's flash kernel cannot run.

On a CPU with AMX or AVX512-BF16, torch's CPU flash-attention kernel packs bf16/fp16 blocks for its brgemm path
because the hardware has it, but the packing routine refuses unless the kernel family torch dispatched to is AVX512.
Under ``ATEN_CPU_CAPABILITY=default`` or ``avx2`` (what ``make test-kernels`` runs, and what a user sets to reproduce
an AVX2 host) every half-precision SDPA call of 64 tokens or more then raises "pack_vnni2 is only supported when
avx512 is supported" (torch 2.13). SDPA's math backend computes the same attention, slower. :func:`ensure_cpu_sdpa`
probes once per process and, where the probe raises, turns the flash backend off; a process with a GPU keeps it
(the flag is global, and its training runs on the GPU's kernels) and is warned instead.
Every model parathink runs comes through ``load_model`` or ``build_tiny_model``, which call it.
"""

from __future__ import annotations

import functools
import logging

import torch

log = logging.getLogger(__name__)

PROBE_TOKENS = 64  # the kernel takes its packing path from 64 query tokens up (shorter calls never fail)


def probe_error(dtype: torch.dtype) -> str | None:
    """The error a small CPU SDPA call in ``dtype`` raises, or None when it runs."""
    q = torch.zeros(1, 1, PROBE_TOKENS, 16, dtype=dtype)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


@functools.cache
def ensure_cpu_sdpa() -> str | None:
    """Turn SDPA's flash backend off if it cannot run half precision on this CPU; returns what was found, or None."""
    for dtype in (torch.bfloat16, torch.float16):
        error = probe_error(dtype)
        if error is None:
            continue
        found = (f"torch's CPU flash attention fails in {dtype} under kernel family "
                 f"{torch.backends.cpu.get_cpu_capability()}: {error}")
        if torch.cuda.is_available():
            log.warning("%s; CPU attention in half precision will fail (the GPU keeps its flash kernel)", found)
        else:
            torch.backends.cuda.enable_flash_sdp(False)  # global: CPU SDPA then takes the math backend
            log.warning("%s; SDPA's math backend is used instead", found)
            if probe_error(dtype) is not None:
                raise RuntimeError(f"{found}; the math backend fails too")
        return found
    return None

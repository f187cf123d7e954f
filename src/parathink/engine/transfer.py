"""Host-to-device transfers that do not stop the host.

On a GPU, ``torch.tensor(values, device="cuda")`` copies from pageable memory and then waits until the device
has finished all the work queued before it: one such call in a decode loop stalls the loop once per step. The
engine's per-step inputs go through pinned memory instead, non-blocking (PyTorch's pinned allocator keeps each
staging buffer until its copy has run).
"""

from __future__ import annotations

import torch


def upload(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Host values (a list, nested lists) -> a tensor on ``device``, without a host sync on a GPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def upload_into(dst: torch.Tensor, values) -> None:
    """Copy host values into the device tensor ``dst`` (same shape), without a host sync on a GPU."""
    if dst.device.type != "cuda":
        dst.copy_(torch.tensor(values, dtype=dst.dtype))
        return
    dst.copy_(torch.tensor(values, dtype=dst.dtype, pin_memory=True), non_blocking=True)

"""The training forward's log-probs of sampled responses (what the RL update and the consistency test use).

One full forward of prompt + response per sample under the layout the engine sampled with
(``Engine.layout``: plain causal in ``causal`` mode, ``build_layout`` in ``structured`` mode), through the
model's own forward with the 4-D mask and position ids of ``parathink.modeling.structured_inputs``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from parathink.formats.layouts import build_batch_layout
from parathink.modeling.attention import structured_inputs


def recompute_logprobs(model, engine, samples: Sequence, with_entropy: bool = False,
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs [B, T] of each sample's response tokens (T = longest response; zero-padded), and
    their entropies [B, T] when ``with_entropy``. Keeps the autograd graph (the RL update differentiates it)."""
    if not samples:
        raise ValueError("recompute_logprobs: no samples")
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    tags = engine.tags if engine.mode == "structured" else None
    layout = build_batch_layout(seqs, tags)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    length = layout.position_ids.shape[1]
    ids = torch.full((len(seqs), length), engine.pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    config = getattr(model, "module", model).config  # a DDP / DeepSpeed wrapper holds the model as .module
    inputs = structured_inputs(layout, dtype=dtype, path_ids=bool(getattr(config, "parathink_max_paths", 0)))
    inputs = {k: v.to(device) for k, v in inputs.items()}
    logits = model(input_ids=ids.to(device), **inputs).logits  # [B, L, V]
    width = max(len(s.response_ids) for s in samples)
    # Response token j of sample b sits at n_b + j and is predicted from position n_b + j - 1.
    starts = torch.tensor([len(s.prompt_ids) - 1 for s in samples], device=device)
    index = (starts[:, None] + torch.arange(width, device=device)[None]).clamp(max=length - 1)  # [B, T]
    picked = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1])).float()  # [B, T, V]
    logp_all = torch.log_softmax(picked, -1)
    targets = torch.zeros(len(samples), width, dtype=torch.long, device=device)
    valid = torch.zeros(len(samples), width, dtype=torch.bool, device=device)
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        targets[i, :n] = torch.tensor(s.response_ids, device=device)
        valid[i, :n] = True
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1) * valid  # [B, T]
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1) * valid  # [B, T]
    return logp, entropy

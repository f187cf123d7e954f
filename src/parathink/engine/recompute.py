"""The training forward's log-probs of sampled responses (what the RL update and the consistency test use).

One full forward of prompt + response per sample under the layout the engine sampled with
(``Engine.layout``: plain causal in ``causal`` mode, ``build_layout`` in ``structured`` mode), through the
model's own forward: SDPA's causal path in ``causal`` mode, the 4-D mask and position ids built on the device in
``structured`` mode (``parathink.modeling.attention``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from parathink.modeling.attention import causal_batch_inputs, structured_batch_inputs
from parathink.modeling.chunked import final_hidden, projectable, token_logprobs

CHUNK_TOKENS = 1024  # response tokens per lm_head chunk (see the module docstring)


def recompute_logprobs(model, engine, samples: Sequence, with_entropy: bool = False,
                       chunk_tokens: int = CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs [B, T] of each sample's response tokens (T = longest response; zero-padded), and
    their entropies [B, T] when ``with_entropy``. Keeps the autograd graph (the RL update differentiates it)."""
    if not samples:
        raise ValueError("recompute_logprobs: no samples")
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), engine.pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    inner = getattr(model, "module", model)  # a DDP / DeepSpeed wrapper holds the model as .module
    with_paths = bool(getattr(inner.config, "parathink_max_paths", 0))
    # causal: SDPA's is_causal path, no [L, L] mask; structured: the mask built on the device (modeling.attention)
    inputs = (structured_batch_inputs(seqs, engine.tags, device, dtype, with_paths) if engine.mode == "structured"
              else causal_batch_inputs(len(seqs), length, device, with_paths))
    # The real response tokens, flattened: token j of sample b sits at n_b + j and is predicted from n_b + j - 1.
    rows = torch.cat([torch.full((len(s.response_ids),), i, dtype=torch.long) for i, s in enumerate(samples)])
    cols = torch.cat([torch.arange(len(s.response_ids)) for s in samples])
    source = torch.cat([torch.arange(len(s.response_ids)) + len(s.prompt_ids) - 1 for s in samples])
    targets = torch.cat([torch.as_tensor(list(s.response_ids), dtype=torch.long) for s in samples])
    rows, cols, source, targets = (t.to(device) for t in (rows, cols, source, targets))
    if projectable(inner):
        hidden, autocast = final_hidden(model, ids.to(device), inputs)  # [B, L, H]
        project = inner.lm_head
    else:
        hidden = model(input_ids=ids.to(device), **inputs).logits  # [B, L, V]: a model without an lm_head to chunk
        project, autocast = None, contextlib.nullcontext()
    with autocast:
        logp, entropy = token_logprobs(project, hidden[rows, source], targets, chunk_tokens, with_entropy)  # [N]
    width = max(len(s.response_ids) for s in samples)
    logp = _scatter(logp, rows, cols, len(samples), width)  # [B, T]
    entropy = _scatter(entropy, rows, cols, len(samples), width) if with_entropy else None
    return logp, entropy


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, batch: int, width: int) -> torch.Tensor:
    out = values.new_zeros(batch, width)
    return out.index_put((rows, cols), values)

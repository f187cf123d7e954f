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

CHUNK_TOKENS = 1024  # response tokens per lm_head chunk (see the module docstring)


def recompute_logprobs(model, engine, samples: Sequence, with_entropy: bool = False,
                       chunk_tokens: int = CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs [B, T] of each sample's response tokens (T = longest response; zero-padded), and
    their entropies [B, T] when ``with_entropy``. Keeps the autograd graph (the RL update differentiates it)."""
    if not samples:
        raise ValueError("recompute_logprobs: no samples")
    if chunk_tokens < 1:
        raise ValueError(f"recompute_logprobs: chunk_tokens={chunk_tokens} must be >= 1")
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    tags = engine.tags if engine.mode == "structured" else None
    layout = build_batch_layout(seqs, tags)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    length = layout.position_ids.shape[1]
    ids = torch.full((len(seqs), length), engine.pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    inner = getattr(model, "module", model)  # a DDP / DeepSpeed wrapper holds the model as .module
    inputs = structured_inputs(layout, dtype=dtype, path_ids=bool(getattr(inner.config, "parathink_max_paths", 0)))
    inputs = {k: v.to(device) for k, v in inputs.items()}
    # The real response tokens, flattened: token j of sample b sits at n_b + j and is predicted from n_b + j - 1.
    rows = torch.cat([torch.full((len(s.response_ids),), i, dtype=torch.long) for i, s in enumerate(samples)])
    cols = torch.cat([torch.arange(len(s.response_ids)) for s in samples])
    source = torch.cat([torch.arange(len(s.response_ids)) + len(s.prompt_ids) - 1 for s in samples])
    targets = torch.cat([torch.as_tensor(list(s.response_ids), dtype=torch.long) for s in samples])
    rows, cols, source, targets = (t.to(device) for t in (rows, cols, source, targets))
    if hasattr(inner, "lm_head") and hasattr(inner, "model"):
        hidden = _final_hidden(model, inner, ids.to(device), inputs)  # [B, L, H]
        project = inner.lm_head
    else:
        hidden = model(input_ids=ids.to(device), **inputs).logits  # [B, L, V]: a model without an lm_head to chunk
        project = None
    picked = hidden[rows, source]  # [N, H] (or [N, V])
    pieces = [_chunk_logprobs(project, picked[i:i + chunk_tokens], targets[i:i + chunk_tokens], with_entropy)
              for i in range(0, len(targets), chunk_tokens)]
    width = max(len(s.response_ids) for s in samples)
    logp = _scatter(torch.cat([p[0] for p in pieces]), rows, cols, len(samples), width)  # [B, T]
    entropy = _scatter(torch.cat([p[1] for p in pieces]), rows, cols, len(samples), width) if with_entropy else None
    return logp, entropy


def _final_hidden(model, inner, ids: torch.Tensor, inputs: dict) -> torch.Tensor:
    """The decoder's last hidden states [B, L, H] from a forward through ``model`` (the wrapper, if any) that
    projects one position only."""
    seen: list[torch.Tensor] = []
    hook = inner.model.register_forward_hook(lambda _m, _a, out: seen.append(out.last_hidden_state))
    try:
        model(input_ids=ids, logits_to_keep=1, **inputs)
    finally:
        hook.remove()
    return seen[-1]


def _chunk_logprobs(project, states: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
    """(log-probs [n], entropies [n] or None) of ``targets`` from ``states`` [n, H] through ``project`` (or from
    logits [n, V] when ``project`` is None); checkpointed under autograd so the chunk's logits are not kept."""
    def fn(x: torch.Tensor):
        logits = (project(x) if project is not None else x).float()  # [n, V]
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        if not with_entropy:
            return logp, None
        return logp, -(logp_all.exp() * logp_all).sum(-1)

    if torch.is_grad_enabled() and states.requires_grad:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(fn, states, use_reentrant=False)
    return fn(states)


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, batch: int, width: int) -> torch.Tensor:
    out = values.new_zeros(batch, width)
    return out.index_put((rows, cols), values)

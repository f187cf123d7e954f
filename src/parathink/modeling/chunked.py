"""Token log-probs through a model's ``lm_head`` in chunks, so that no [tokens, V] fp32 tensor is whole.

Shared by the RL update (``parathink.engine.recompute``) and the SFT loss (``parathink.training.sft``): the forward
runs through the model's wrapper with ``logits_to_keep=1`` (one position projected, unused; DDP and DeepSpeed see
the forward they expect) while a hook takes the decoder's final hidden states; the caller picks the positions it
needs and projects them ``chunk_tokens`` at a time, each chunk checkpointed under autograd (its logits are
recomputed in the backward instead of kept). A chunk of 1,024 tokens of Qwen3-4B's 151,936-entry vocabulary holds
three fp32 [1,024, V] tensors at its backward, 1.7 GiB; one 5,000-token sequence's fp32 logits whole are 2.8 GiB, an
SFT micro-batch of 4 x 8,192 tokens 18.5 GiB.
"""

from __future__ import annotations

import torch


def projectable(model) -> bool:
    """A Hugging Face causal LM (``.model`` decoder, ``.lm_head``) whose hidden states can be projected in chunks."""
    return hasattr(model, "lm_head") and hasattr(model, "model")


def final_hidden(model, ids: torch.Tensor, inputs: dict):
    """(the decoder's last hidden states [B, L, H], the autocast the forward ran under) from a forward through
    ``model`` (the wrapper, if any) that projects one position only. accelerate's mixed precision wraps the forward
    alone in autocast; the chunks are projected under the same one, so that they compute as the model's own
    ``lm_head`` would have."""
    import contextlib

    inner = getattr(model, "module", model)
    seen: list = []

    def keep(_module, _args, out):
        device = out.last_hidden_state.device.type
        mode = (device, torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None
        seen.append((out.last_hidden_state, mode))

    hook = inner.model.register_forward_hook(keep)
    try:
        model(input_ids=ids, logits_to_keep=1, **inputs)
    finally:
        hook.remove()
    hidden, mode = seen[-1]
    context = torch.autocast(mode[0], dtype=mode[1]) if mode else contextlib.nullcontext()
    return hidden, context


def chunk_logprobs(project, states: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
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


def token_logprobs(project, states: torch.Tensor, targets: torch.Tensor, chunk_tokens: int,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [N], entropies [N] or None) of ``targets`` [N] from ``states`` [N, H] (or logits when ``project``
    is None), ``chunk_tokens`` at a time."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens={chunk_tokens} must be >= 1")
    pieces = [chunk_logprobs(project, states[i:i + chunk_tokens], targets[i:i + chunk_tokens], with_entropy)
              for i in range(0, len(targets), chunk_tokens)]
    logp = torch.cat([p[0] for p in pieces])
    return logp, torch.cat([p[1] for p in pieces]) if with_entropy else None


def causal_lm_nll(model, inputs: dict, chunk_tokens: int,
                  ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """(the summed negative log-likelihood of the labelled tokens, their count) of a causal-LM batch (``input_ids``,
    ``labels`` with ``ignore_index`` where no loss, and the model's other inputs), ``chunk_tokens`` at a time: token t
    is predicted from position t - 1, as transformers' own loss shifts it."""
    inputs = dict(inputs)
    labels = inputs.pop("labels")[:, 1:]
    hidden, autocast = final_hidden(model, inputs.pop("input_ids"), inputs)
    keep = labels != ignore_index
    with autocast:
        logp, _ = token_logprobs(getattr(model, "module", model).lm_head, hidden[:, :-1][keep], labels[keep],
                                 chunk_tokens)
    return -logp.sum(), keep.sum()

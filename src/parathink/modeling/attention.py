"""Structured attention through the model's own attention code.

A layout (``parathink.formats.layouts``) gives a bool mask [L, L] or [B, L, L] (True = may attend) and
position ids. Hugging Face attention takes a prepared 4-D mask as-is, so we hand it an *additive* float mask
[B, 1, L, L] (0 where allowed, the dtype's minimum elsewhere): eager adds it to the scores and sdpa accepts it
unchanged, so training, the rollout engine and RL's log-prob recompute all see one mask through one function.
"""

from __future__ import annotations

import torch

# Implementations that take an arbitrary 4-D mask. flash_attention_* only takes padding, so a structured
# layout would silently turn into plain causal attention there: refuse it instead.
ATTN_WITH_4D_MASK = ("eager", "sdpa", "flex_attention")


def to_4d_mask(mask_bool: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[L, L] or [B, L, L] bool (True = may attend) -> additive [B, 1, L, L] in ``dtype``.

    Every row must allow at least one key (a layout's padding rows attend to themselves), otherwise softmax
    over an all-minimum row would give uniform attention over keys the row must not see.
    """
    if mask_bool.dtype != torch.bool:
        raise TypeError(f"to_4d_mask: expected a bool mask, got {mask_bool.dtype}")
    if mask_bool.dim() == 2:
        mask_bool = mask_bool.unsqueeze(0)
    if mask_bool.dim() != 3 or mask_bool.shape[-1] != mask_bool.shape[-2]:
        raise ValueError(f"to_4d_mask: expected [L, L] or [B, L, L], got {tuple(mask_bool.shape)}")
    if not bool(mask_bool.any(-1).all()):
        raise ValueError("to_4d_mask: a row of the mask allows no key (padding rows must attend to themselves)")
    out = torch.zeros(mask_bool.shape, dtype=dtype, device=mask_bool.device)
    out.masked_fill_(~mask_bool, torch.finfo(dtype).min)
    return out.unsqueeze(1)  # [B, 1, L, L]


def attn_implementation(model) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def check_structured_attention(model) -> None:
    """Raise before training when the model's attention cannot take a 4-D mask."""
    impl = attn_implementation(model)
    if impl not in ATTN_WITH_4D_MASK:
        raise ValueError(
            f"structured attention needs a 4-D attention mask, but the model uses attn_implementation={impl!r}; "
            f"set model.attn_implementation to one of {ATTN_WITH_4D_MASK}"
        )


def structured_inputs(layout, dtype: torch.dtype = torch.float32, path_ids: bool = False) -> dict[str, torch.Tensor]:
    """Model keyword arguments for a (batch) layout: 4-D mask, position ids, and (ParaThinker) path ids."""
    pos = layout.position_ids
    pos = pos.unsqueeze(0) if pos.dim() == 1 else pos  # [B, L]
    out = {"attention_mask": to_4d_mask(layout.attention_mask, dtype), "position_ids": pos}
    if path_ids:
        ids = layout.path_ids
        out["path_ids"] = ids.unsqueeze(0) if ids.dim() == 1 else ids  # [B, L]
    return out


# ----------------------------------------------------------------------------------------------------------------
# The RL update's inputs, built where the model runs (``parathink.engine.recompute_logprobs``)
#
# A dense additive mask for a micro-batch of 8 x 5,000 tokens is 8 x 5,000^2 entries: 400 MB in bf16 (and a 200 MB
# bool layout beside it), built row by row on the host and copied to the device per forward; worse, any 4-D mask keeps
# SDPA off its flash kernel. The causal grammar needs none: right padding sits after every real token, so a causal
# query never reaches it and SDPA's ``is_causal`` path computes the real tokens exactly (the padded rows' outputs are
# never read). Structured grammars keep their mask, built on the device from [B, L] per-token tables instead.


def causal_batch_inputs(batch: int, length: int, device, path_ids: bool = False) -> dict[str, torch.Tensor]:
    """Model keyword arguments for right-padded causal rows: no mask and no position ids, so that transformers hands
    SDPA ``attn_mask=None, is_causal=True`` (eager builds its own causal mask on the device). Position ids are left
    out on purpose: a padded row's restarted positions would read as packed sequences and bring a dense mask back."""
    out: dict[str, torch.Tensor] = {}
    if path_ids:
        out["path_ids"] = torch.zeros(batch, length, dtype=torch.long, device=device)
    return out


def structured_batch_inputs(seqs, tags, device, dtype: torch.dtype = torch.float32,
                            path_ids: bool = False) -> dict[str, torch.Tensor]:
    """Model keyword arguments for right-padded structured rows: the additive [B, 1, L, L] mask of
    ``to_4d_mask(build_batch_layout(seqs, tags).attention_mask)``, built on ``device`` one row at a time from each
    token's path index and block (``layouts.scan``), with the layout's position and path ids. Only [B, L] tables
    cross from the host; the device holds the mask and one row's [L, L] temporaries."""
    from parathink.formats.layouts import scan

    b, length = len(seqs), max(len(s) for s in seqs)
    tables = torch.zeros(4, b, length, dtype=torch.long)  # positions, path ids, block ids, path index (0 = no path)
    for row, seq in enumerate(seqs):
        pos, pid, blk, _region, order = scan(list(seq), tags)
        tables[:, row, :len(seq)] = torch.tensor([pos, pid, blk, order], dtype=torch.long)
    pos, pid, blk, order = tables.to(device).unbind(0)
    k = torch.arange(length, device=device)
    causal = k[None, :] <= k[:, None]  # [L, L]
    mask = torch.full((b, 1, length, length), torch.finfo(dtype).min, dtype=dtype, device=device)
    for row, seq in enumerate(seqs):
        n = len(seq)
        o, g = order[row, :n], blk[row, :n]
        in_path = o > 0
        # layouts._mask: causal, except a path token never sees another path of its own block
        other_path = in_path[:, None] & in_path[None, :] & (g[:, None] == g[None, :]) & (o[:, None] != o[None, :])
        mask[row, 0, :n, :n].masked_fill_(causal[:n, :n] & ~other_path, 0)
        pad = k[n:]
        mask[row, 0, pad, pad] = 0  # padding rows attend to themselves only, so that no softmax row is empty
    out = {"attention_mask": mask, "position_ids": pos}
    if path_ids:
        out["path_ids"] = pid
    return out

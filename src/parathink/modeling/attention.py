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

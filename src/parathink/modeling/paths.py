"""ParaThinker's per-path vectors (ParaThinker §3.2, "thought embeddings").

Each path i of a block gets a learned vector added to its tokens' keys (before the rotary embedding) and
values, so the summary can tell the paths apart although their positions coincide. The vectors start at zero:
a freshly equipped model computes exactly what the plain model does. Tokens outside paths (path id 0) get none.

We replace the attention module's ``forward`` with one that reads ``path_ids`` [B, L] from the keyword
arguments the decoder passes down (``model(..., path_ids=...)``); everything else is the model's own code.
The switch is recorded in the config (``parathink_max_paths``) so that ``load_model`` re-installs it.
"""

from __future__ import annotations

import sys
import types

import torch
from torch import nn

CONFIG_KEY = "parathink_max_paths"


class PathVectors(nn.Module):
    """Per-layer key and value vectors for path ids 1..max_paths, zero-initialised."""

    def __init__(self, max_paths: int, kv_dim: int):
        super().__init__()
        self.key = nn.Parameter(torch.zeros(max_paths + 1, kv_dim))
        self.value = nn.Parameter(torch.zeros(max_paths + 1, kv_dim))

    def forward(self, path_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Row 0 is never trained in effect: masking keeps non-path tokens exactly as the plain model has them.
        inside = (path_ids > 0).unsqueeze(-1)  # [B, L, 1]
        ids = path_ids.clamp(max=self.key.shape[0] - 1)
        return self.key[ids] * inside, self.value[ids] * inside  # [B, L, kv_dim] each


def _forward_with_paths(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kwargs):
    """Qwen3/Llama-style attention forward with path vectors added to k (pre-RoPE) and v."""
    mod = sys.modules[type(self).__module__]
    path_ids = kwargs.pop("path_ids", None)  # [B, L] or None
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q = self.q_proj(hidden_states).view(hidden_shape)
    k = self.k_proj(hidden_states).view(hidden_shape)
    v = self.v_proj(hidden_states)
    if hasattr(self, "q_norm"):
        q, k = self.q_norm(q), self.k_norm(k)
    if path_ids is not None:
        dk, dv = self.path_vectors(path_ids.to(hidden_states.device))
        k = k + dk.view(hidden_shape).to(k.dtype)
        v = v + dv.to(v.dtype)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = v.view(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    q, k = mod.apply_rotary_pos_emb(q, k, cos, sin)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, self.layer_idx)
    attention = mod.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, mod.eager_attention_forward)
    dropout = 0.0 if not self.training else self.attention_dropout
    out, weights = attention(self, q, k, v, attention_mask, dropout=dropout,
                             scaling=self.scaling, sliding_window=getattr(self, "sliding_window", None), **kwargs)
    return self.o_proj(out.reshape(*input_shape, -1).contiguous()), weights


def _attention_modules(model) -> list[nn.Module]:
    mods = [m for name, m in model.named_modules() if name.endswith("self_attn")]
    if not mods or not all(hasattr(m, "k_proj") and hasattr(m, "head_dim") for m in mods):
        raise ValueError(f"path vectors need Qwen3/Llama-style attention modules; {type(model).__name__} has none")
    return mods


def install_path_vectors(model, max_paths: int) -> None:
    """Equip every attention layer with zero-initialised path vectors (idempotent) and record it in the config."""
    if max_paths < 1:
        raise ValueError(f"install_path_vectors: max_paths must be >= 1, got {max_paths}")
    for attn in _attention_modules(model):
        if not hasattr(attn, "path_vectors"):
            kv_dim = attn.k_proj.out_features
            p = next(attn.parameters())
            attn.path_vectors = PathVectors(max_paths, kv_dim).to(device=p.device, dtype=p.dtype)
            attn.forward = types.MethodType(_forward_with_paths, attn)
    setattr(model.config, CONFIG_KEY, int(max_paths))

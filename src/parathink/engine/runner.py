"""Model forwards over a ``RowCache``: one step for a contiguous range of rows.

Two implementations of the same call, ``forward(tokens, positions, row0, cache, path_ids) -> logits``:

- ``FastRunner`` runs Qwen3/Llama-style decoders (what the tiny default and Qwen3-4B are) as a short
  functional forward over the model's own weights: fused q/k/v and gate/up projections, ``F.rms_norm``, one
  ``sdpa`` call per layer with the query heads packed onto their key/value head. A tiny model on a CPU is
  all per-op overhead, and this is where the engine's speed over ``generate`` comes from.
- ``HFRunner`` calls the model's own ``forward`` with the cache behind the ``past_key_values.update``
  protocol; any decoder whose attention takes a 4-D mask works, at transformers' per-call cost.

Both read the layout's positions and give the same logits the training forward gives (tested to 1e-4).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parathink.engine.cache import RowCache


def _is_llama_like(model) -> bool:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return False
    if getattr(model.config, "hidden_act", "silu") != "silu":
        return False
    attn, mlp = layers[0].self_attn, layers[0].mlp
    return all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim")) and all(
        hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))


# ``auto`` keeps large models on the plain forward: the fast runner holds a transposed copy of the weights.
FAST_MAX_PARAMS = 1_000_000_000


def make_runner(model, backend: str = "auto"):
    """``fast`` for Qwen3/Llama-style decoders, ``hf`` for anything else; ``auto`` picks fast for such decoders
    up to FAST_MAX_PARAMS parameters."""
    if backend not in ("auto", "fast", "hf"):
        raise ValueError(f"engine backend must be auto, fast or hf, got {backend!r}")
    small = sum(p.numel() for p in model.parameters()) <= FAST_MAX_PARAMS
    if backend == "hf" or (backend == "auto" and not (_is_llama_like(model) and small)):
        return HFRunner(model)
    if not _is_llama_like(model):
        raise ValueError(f"engine backend 'fast' needs a Qwen3/Llama-style decoder, got {type(model).__name__}")
    return FastRunner(model)


def cache_shape(model) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a decoder."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", cfg.num_attention_heads), head_dim


def _decode_mask(cache: RowCache, row0: int, b: int, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """Additive [B, 1, 1, S] (0 = may attend, -inf = not): every valid entry of the row plus the slot being
    written. Float rather than bool: sdpa would convert a bool mask again in every layer."""
    lens = cache.lens[row0:row0 + b]
    s = int(lens.max()) + 1
    blocked = torch.arange(s, device=lens.device) > lens[:, None]  # [B, S]
    mask = torch.zeros(blocked.shape, dtype=dtype, device=lens.device).masked_fill_(blocked, float("-inf"))
    return mask[:, None, None, :], s


class HFRunner:
    """The model's own forward; the cache is handed in through the ``past_key_values.update`` protocol."""

    def __init__(self, model):
        self.model = model
        self.path_vectors = bool(getattr(model.config, "parathink_max_paths", 0))

    def sync(self) -> None:
        """Nothing to refresh: the model's modules are used directly."""

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, row0: int, cache: RowCache,
                path_ids: torch.Tensor | None, last: torch.Tensor | None = None) -> torch.Tensor:
        """tokens, positions [B, T] -> logits [B, V] at ``last`` [B] (T > 1: prefill of fresh rows)."""
        b, t = tokens.shape
        dtype = next(self.model.parameters()).dtype
        if t == 1:
            mask, s = _decode_mask(cache, row0, b, dtype)
        else:
            s = t
            allowed = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril_()[None, None].expand(b, 1, t, t)
            mask = torch.zeros(allowed.shape, dtype=dtype, device=tokens.device)
            mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        view = _CacheView(cache, row0, s)
        extra = {"path_ids": path_ids} if self.path_vectors and path_ids is not None else {}
        out = self.model(input_ids=tokens, attention_mask=mask, position_ids=positions, past_key_values=view,
                         use_cache=True, **extra)
        logits = out.logits  # [B, T, V]
        return logits[:, -1] if last is None else logits[torch.arange(b, device=logits.device), last]


class _CacheView:
    """What a transformers attention layer calls: ``update(k, v, layer_idx) -> (keys, values)``."""

    def __init__(self, cache: RowCache, row0: int, s: int):
        self.cache, self.row0, self.s = cache, row0, s

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        kc, vc = self.cache.write(layer_idx, self.row0, key_states, value_states)
        return kc[:, :, :self.s], vc[:, :, :self.s]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.s - 1


def _rms_normed(x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, computed in fp32 as transformers' RMSNorm does, without
    the weight (folded into the next projection). ``F.rms_norm`` is a slow composite on a CPU for tiny rows; a
    vector norm and three pointwise ops give the same value (to rounding)."""
    r = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    return (x * torch.rsqrt(torch.addcmul(eps, r, r, value=1.0 / x.shape[-1]))).to(x.dtype)


def _lin(x: torch.Tensor, wt: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] @ wt [in, out] (+ b): ``mm`` on a pre-transposed weight skips ``linear``'s overhead."""
    y = torch.mm(x, wt) if x.dim() == 2 else torch.matmul(x, wt)
    return y if b is None else y + b


class FastRunner:
    """A functional Qwen3/Llama forward over the model's weights (see the module docstring).

    ``sync`` keeps transposed copies of the weights with each RMSNorm's weight folded into the projection
    after it (norm(x) @ W^T == (x / rms(x)) @ (diag(w) W^T)): fine for small models, where this runner is
    worth it; ``make_runner`` picks the plain forward for large ones.
    """

    def __init__(self, model):
        self.model = model
        cfg = model.config
        self.layers_n, self.kv_heads, self.head_dim = cache_shape(model)
        self.heads = cfg.num_attention_heads
        self.path_vectors = bool(getattr(cfg, "parathink_max_paths", 0))
        self.rope_len = 0
        self.sync()

    def sync(self) -> None:
        """Re-read the weights (RL changes them between calls); called at the start of every generate."""
        m = self.model
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        p = next(m.parameters())
        self.eps = torch.tensor(float(getattr(m.config, "rms_norm_eps", 1e-6)), device=p.device)  # fp32
        with torch.no_grad():
            self.embed = m.model.embed_tokens.weight.detach()
            self.head = (m.lm_head.weight * m.model.norm.weight).t().contiguous()  # [H, V], final norm folded
            self.head_b = None if getattr(m.lm_head, "bias", None) is None else m.lm_head.bias.detach()
            self.layers = []
            for layer in m.model.layers:
                a, mlp = layer.self_attn, layer.mlp
                ln1, ln2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
                qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
                qkv_b = None
                if a.q_proj.bias is not None:
                    qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
                qk_norm = None
                if hasattr(a, "q_norm"):  # Qwen3: per-head RMSNorm of q and k, here one weight [Hq + Hk, D]
                    qk_norm = torch.cat([a.q_norm.weight.expand(hq, d), a.k_norm.weight.expand(hk, d)])
                gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                self.layers.append(dict(
                    qkv=(qkv * ln1).t().contiguous(), qkv_b=qkv_b,
                    o=a.o_proj.weight.t().contiguous(), o_b=None if a.o_proj.bias is None else a.o_proj.bias.detach(),
                    qk_norm=qk_norm, gate_up=(gate_up * ln2).t().contiguous(),
                    down=mlp.down_proj.weight.t().contiguous(),
                    pv=a.path_vectors if hasattr(a, "path_vectors") else None,
                    scale=float(getattr(a, "scaling", d ** -0.5)),
                ))
        self.rope_len = 0  # the rotary table is rebuilt on the next call

    def _rope(self, n: int, device) -> None:
        """cos and signed sin tables for positions [0, n), from the model's own rotary module."""
        if n <= self.rope_len:
            return
        n = max(n, 2 * self.rope_len, 256)
        cos, sin = self.model.model.rotary_emb(self.embed[:1], torch.arange(n, device=device)[None])  # [1, n, D]
        half = self.head_dim // 2
        # rotate_half(x) * sin == roll(x, half) * [-sin_lo, sin_hi]: one op fewer per rotation.
        self.cos, self.sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        self.rope_len = n

    def _qkv(self, w: dict, x: torch.Tensor, cos, sin, path_ids) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual x [..., H] -> q and k rotated, v: qk [..., Hq + Hk, D], v [..., Hk, D]."""
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        qkv = _lin(_rms_normed(x, self.eps), w["qkv"], w["qkv_b"]).unflatten(-1, (hq + 2 * hk, d))
        qk, v = qkv[..., :hq + hk, :], qkv[..., hq + hk:, :]
        if w["qk_norm"] is not None:
            qk = _rms_normed(qk, self.eps) * w["qk_norm"]
        if path_ids is not None:  # ParaThinker: per-path vectors on k (after its norm, before RoPE) and v
            ids = path_ids.clamp(max=w["pv"].key.shape[0] - 1)
            inside = (path_ids > 0)[..., None]
            k = qk[..., hq:, :] + (w["pv"].key[ids] * inside).unflatten(-1, (hk, d))
            qk = torch.cat([qk[..., :hq, :], k], -2)
            v = v + (w["pv"].value[ids] * inside).unflatten(-1, (hk, d))
        return qk * cos + qk.roll(d // 2, -1) * sin, v

    def _mlp(self, w: dict, x: torch.Tensor) -> torch.Tensor:
        gate, up = _lin(_rms_normed(x, self.eps), w["gate_up"]).chunk(2, -1)
        return _lin(F.silu(gate) * up, w["down"])

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, row0: int, cache: RowCache,
                path_ids: torch.Tensor | None, last: torch.Tensor | None = None) -> torch.Tensor:
        """tokens, positions [B, T] -> logits [B, V] at ``last`` [B] (T > 1: prefill of fresh rows)."""
        self._rope(int(positions.max()) + 1, tokens.device)
        if not self.path_vectors:
            path_ids = None
        if tokens.shape[1] == 1:
            x = self._decode(tokens[:, 0], positions[:, 0], row0, cache, None if path_ids is None else path_ids[:, 0])
        else:
            x = self._prefill(tokens, positions, row0, cache, path_ids)
            x = x[torch.arange(x.shape[0], device=x.device), last]
        return _lin(_rms_normed(x, self.eps), self.head, self.head_b)

    def _decode(self, tokens, positions, row0: int, cache: RowCache, path_ids) -> torch.Tensor:
        """One token per row: tokens, positions [B] -> last hidden states [B, H]."""
        b = tokens.shape[0]
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        allowed, s = _decode_mask(cache, row0, b, self.embed.dtype)
        slots = cache.step_index(row0, b)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, D]
        x = F.embedding(tokens, self.embed)  # [B, H]
        for li, w in enumerate(self.layers):
            qk, v = self._qkv(w, x, cos, sin, path_ids)  # [B, Hq + Hk, D], [B, Hk, D]
            cache.write_step(li, slots, torch.cat([qk[:, hq:], v], 1))
            keys, values = cache.layer(li, row0, b, s)
            # The query heads that share a key/value head attend together: [B, Hk, Hq/Hk, D] vs [B, Hk, S, D].
            o = F.scaled_dot_product_attention(qk[:, :hq].reshape(b, hk, hq // hk, d), keys, values,
                                               attn_mask=allowed, scale=w["scale"])
            x = x + _lin(o.reshape(b, hq * d), w["o"], w["o_b"])
            x = x + self._mlp(w, x)
        return x

    def _prefill(self, tokens, positions, row0: int, cache: RowCache, path_ids) -> torch.Tensor:
        """Fresh right-padded rows: tokens, positions [B, T] -> hidden states [B, T, H] (plain causal)."""
        hq, hk = self.heads, self.kv_heads
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # [B, T, 1, D]
        x = F.embedding(tokens, self.embed)  # [B, T, H]
        for li, w in enumerate(self.layers):
            qk, v = self._qkv(w, x, cos, sin, path_ids)  # [B, T, Hq + Hk, D], [B, T, Hk, D]
            q, k, v = qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2), v.transpose(1, 2)
            cache.write(li, row0, k, v)
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1),
                                               is_causal=True, scale=w["scale"])
            x = x + _lin(o.transpose(1, 2).flatten(2), w["o"], w["o_b"])
            x = x + self._mlp(w, x)
        return x

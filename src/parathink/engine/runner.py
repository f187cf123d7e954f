"""Model forwards over a ``RowCache``: a decode step of rows [0, B), a prefill of fresh rows.

Two implementations of the same calls, ``decode(tokens, positions, lens, path_ids, cache, s) -> logits`` and
``prefill(tokens, positions, row0, cache, path_ids, last) -> logits``:

- ``FastRunner`` runs Qwen3/Llama-style decoders (what the tiny default and Qwen3-4B are) as a short
  functional forward over the model's own weights: ``F.rms_norm``-free norms, one ``sdpa`` call per layer with
  the query heads packed onto their key/value head. Up to FOLD_MAX_PARAMS parameters it keeps fused,
  pre-transposed copies of the projections with each RMSNorm's weight folded in (a tiny model on a CPU is all
  per-op overhead, and this is where the engine's speed over ``generate`` comes from); above, it reads the
  model's own weights (no second copy of a 4B model). Its decode step reads nothing from the host, so it can
  run at fixed shapes and be captured as a CUDA graph (``parathink.engine.decode.StaticDecode``).
- ``HFRunner`` calls the model's own ``forward`` with the cache behind the ``past_key_values.update``
  protocol; any decoder whose attention takes a 4-D mask works, at transformers' per-call cost.

Both read the layout's positions and give the same logits the training forward gives (tested to 1e-4).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parathink.engine.cache import RowCache

# Above this many parameters the fast runner reads the model's weights in place instead of folded copies.
FOLD_MAX_PARAMS = 1_000_000_000


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


def make_runner(model, backend: str = "auto"):
    """``fast`` for Qwen3/Llama-style decoders, ``hf`` for anything else; ``auto`` picks fast where it can."""
    if backend not in ("auto", "fast", "hf"):
        raise ValueError(f"engine backend must be auto, fast or hf, got {backend!r}")
    if backend == "hf" or (backend == "auto" and not _is_llama_like(model)):
        return HFRunner(model)
    if not _is_llama_like(model):
        raise ValueError(f"engine backend 'fast' needs a Qwen3/Llama-style decoder, got {type(model).__name__}")
    return FastRunner(model)


def cache_shape(model) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a decoder."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", cfg.num_attention_heads), head_dim


def _decode_mask(lens: torch.Tensor, s: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [B, 1, 1, S] (0 = may attend, -inf = not): every valid entry of the row plus the slot being
    written (``lens`` [B] on the device). Float rather than bool: sdpa would convert a bool mask again in every
    layer."""
    blocked = torch.arange(s, device=lens.device) > lens[:, None]  # [B, S]
    mask = torch.zeros(blocked.shape, dtype=dtype, device=lens.device).masked_fill_(blocked, float("-inf"))
    return mask[:, None, None, :]


class HFRunner:
    """The model's own forward; the cache is handed in through the ``past_key_values.update`` protocol."""

    static = False  # transformers' forward is not checked to be free of host syncs: eager decode only

    def __init__(self, model):
        self.model = model
        self.path_vectors = bool(getattr(model.config, "parathink_max_paths", 0))

    def sync(self) -> None:
        """Nothing to refresh: the model's modules are used directly."""

    def prepare(self, positions: int) -> None:
        """Nothing to build: the model's rotary module computes its own tables."""

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, lens: torch.Tensor, path_ids: torch.Tensor | None,
               cache: RowCache, s: int) -> torch.Tensor:
        """One token per row of rows [0, B): tokens, positions, lens [B] -> logits [B, V]."""
        dtype = next(self.model.parameters()).dtype
        view = _CacheView(cache, s, index=cache.step_index(lens))
        return self._call(tokens[:, None], positions[:, None], _decode_mask(lens, s, dtype), view, path_ids)[:, -1]

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, positions: torch.Tensor, row0: int, cache: RowCache,
                path_ids: torch.Tensor | None, last: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Fresh right-padded rows row0..: tokens, positions [B, T] -> logits [B, V] at ``last`` [B]; ``mask``
        [B, 1, T, T] bool (True = may attend) replaces the causal one (a structured row recomputed)."""
        b, t = tokens.shape
        dtype = next(self.model.parameters()).dtype
        allowed = mask if mask is not None else \
            torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril_()[None, None].expand(b, 1, t, t)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=tokens.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        logits = self._call(tokens, positions, mask, _CacheView(cache, t, row0=row0), path_ids)  # [B, T, V]
        return logits[torch.arange(b, device=logits.device), last]

    def _call(self, tokens, positions, mask, view, path_ids) -> torch.Tensor:
        extra = {"path_ids": path_ids if path_ids.dim() == 2 else path_ids[:, None]} \
            if self.path_vectors and path_ids is not None else {}
        out = self.model(input_ids=tokens, attention_mask=mask, position_ids=positions, past_key_values=view,
                         use_cache=True, **extra)
        return out.logits


class _CacheView:
    """What a transformers attention layer calls: ``update(k, v, layer_idx) -> (keys, values)``. Decode
    (``index``): one new entry per row of rows [0, B) at its slot, then the rows up to ``s``; prefill
    (``row0``): fresh rows, whose keys are exactly the new ones."""

    def __init__(self, cache: RowCache, s: int, index: torch.Tensor | None = None, row0: int = 0):
        self.cache, self.s, self.index, self.row0 = cache, s, index, row0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.index is None:
            self.cache.write_prefill(layer_idx, self.row0, key_states, value_states)
            return key_states, value_states
        kv = torch.cat([key_states[:, :, 0], value_states[:, :, 0]], 1)  # [B, 2H, D]
        self.cache.write_step(layer_idx, self.index, kv)
        return self.cache.layer(layer_idx, 0, kv.shape[0], self.s)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.s - 1


def _rms_normed(x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, computed in fp32 as transformers' RMSNorm does, without
    the weight. ``F.rms_norm`` is a slow composite on a CPU for tiny rows; a vector norm and three pointwise
    ops give the same value (to rounding)."""
    r = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    return (x * torch.rsqrt(torch.addcmul(eps, r, r, value=1.0 / x.shape[-1]))).to(x.dtype)


def _lin(x: torch.Tensor, wt, b: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] @ wt [in, out] (+ b); ``wt`` may be a tuple of such weights whose outputs are concatenated.
    ``mm`` on a pre-transposed weight skips ``linear``'s overhead."""
    if isinstance(wt, tuple):
        y = torch.cat([_lin(x, w) for w in wt], -1)
    else:
        y = torch.mm(x, wt) if x.dim() == 2 else torch.matmul(x, wt)
    return y if b is None else y + b


def _detached(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


class FastRunner:
    """A functional Qwen3/Llama forward over the model's weights (see the module docstring).

    ``fold`` (default: the model has at most FOLD_MAX_PARAMS parameters) keeps transposed copies of the weights
    with each RMSNorm's weight folded into the projection after it (norm(x) @ W^T == (x / rms(x)) @
    (diag(w) W^T)); otherwise the projections are transposed views of the model's own weights and the norms'
    weights are applied as they are.
    """

    static = True  # the decode step reads nothing from the host: it can run at fixed shapes, as a CUDA graph

    def __init__(self, model, fold: bool | None = None):
        self.model = model
        cfg = model.config
        self.layers_n, self.kv_heads, self.head_dim = cache_shape(model)
        self.heads = cfg.num_attention_heads
        self.path_vectors = bool(getattr(cfg, "parathink_max_paths", 0))
        self.fold = sum(p.numel() for p in model.parameters()) <= FOLD_MAX_PARAMS if fold is None else fold
        self.w: dict | None = None
        self.rope_len = 0
        self.sync()

    def sync(self) -> None:
        """Re-read the weights (RL changes them between calls); called at the start of every generate.

        A tensor computed from the weights (a folded projection) is refreshed in place, so its address stays
        that of the last call and a CUDA graph captured over it stays valid (``tensors`` lists what a graph reads).
        """
        with torch.no_grad():
            fresh = self._read_weights()
        if self.w is None:
            self.w = fresh
            return
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        self.w = _keep_addresses(self.w, fresh, params)

    def _read_weights(self) -> dict:
        m = self.model
        p = next(m.parameters())
        layers = [self._read_layer(layer) for layer in m.model.layers]
        w = {"eps": torch.tensor(float(getattr(m.config, "rms_norm_eps", 1e-6)), device=p.device),  # fp32
             "embed": m.model.embed_tokens.weight.detach(), "layers": layers,
             "head_b": _detached(getattr(m.lm_head, "bias", None))}
        if self.fold:
            w["head"], w["head_norm"] = (m.lm_head.weight * m.model.norm.weight).t().contiguous(), None  # [H, V]
        else:
            w["head"], w["head_norm"] = m.lm_head.weight.detach().t(), m.model.norm.weight.detach()
        return w

    def _read_layer(self, layer) -> dict:
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        a, mlp = layer.self_attn, layer.mlp
        ln1, ln2 = layer.input_layernorm.weight.detach(), layer.post_attention_layernorm.weight.detach()
        qkv_b = None
        if a.q_proj.bias is not None:
            qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach()
        qk_norm = None
        if hasattr(a, "q_norm"):  # Qwen3: per-head RMSNorm of q and k, here one weight [Hq + Hk, D]
            qk_norm = torch.cat([a.q_norm.weight.expand(hq, d), a.k_norm.weight.expand(hk, d)]).detach()
        out = dict(qkv_b=qkv_b, qk_norm=qk_norm, o_b=_detached(a.o_proj.bias),
                   pv=a.path_vectors if hasattr(a, "path_vectors") else None,
                   scale=float(getattr(a, "scaling", d ** -0.5)))
        if self.fold:
            qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
            out.update(qkv=(qkv * ln1).t().contiguous(), ln1=None, gate_up=(gate_up * ln2).t().contiguous(), ln2=None,
                       o=a.o_proj.weight.t().contiguous(), down=mlp.down_proj.weight.t().contiguous())
        else:
            out.update(qkv=tuple(x.weight.detach().t() for x in (a.q_proj, a.k_proj, a.v_proj)), ln1=ln1,
                       gate_up=(mlp.gate_proj.weight.detach().t(), mlp.up_proj.weight.detach().t()), ln2=ln2,
                       o=a.o_proj.weight.detach().t(), down=mlp.down_proj.weight.detach().t())
        return out

    def prepare(self, positions: int) -> None:
        """cos and signed sin tables for positions [0, n), from the model's own rotary module; built before the
        decode loop (growing them inside it would read the positions back from the device)."""
        if positions <= self.rope_len:
            return
        n = max(positions, 2 * self.rope_len, 256)
        embed = self.w["embed"]
        cos, sin = self.model.model.rotary_emb(embed[:1], torch.arange(n, device=embed.device)[None])  # [1, n, D]
        half = self.head_dim // 2
        # rotate_half(x) * sin == roll(x, half) * [-sin_lo, sin_hi]: one op fewer per rotation.
        self.cos, self.sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        self.rope_len = n

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor a decode step reads besides the cache and its inputs (a CUDA graph bakes their addresses)."""
        out = [self.cos, self.sin] if self.rope_len else []
        stack = [self.w]
        while stack:
            item = stack.pop()
            if isinstance(item, torch.Tensor):
                out.append(item)
            elif isinstance(item, dict):
                stack += list(item.values())
            elif isinstance(item, (list, tuple)):
                stack += list(item)
            elif item is not None and hasattr(item, "key"):  # ParaThinker's PathVectors module
                stack += [item.key, item.value]
        return out

    def _norm(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        y = _rms_normed(x, self.w["eps"])
        return y if weight is None else y * weight

    def _qkv(self, w: dict, x: torch.Tensor, cos, sin, path_ids) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual x [..., H] -> q and k rotated, v: qk [..., Hq + Hk, D], v [..., Hk, D]."""
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        qkv = _lin(self._norm(x, w["ln1"]), w["qkv"], w["qkv_b"]).unflatten(-1, (hq + 2 * hk, d))
        qk, v = qkv[..., :hq + hk, :], qkv[..., hq + hk:, :]
        if w["qk_norm"] is not None:
            qk = _rms_normed(qk, self.w["eps"]) * w["qk_norm"]
        if path_ids is not None:  # ParaThinker: per-path vectors on k (after its norm, before RoPE) and v
            ids = path_ids.clamp(max=w["pv"].key.shape[0] - 1)
            inside = (path_ids > 0)[..., None]
            k = qk[..., hq:, :] + (w["pv"].key[ids] * inside).unflatten(-1, (hk, d))
            qk = torch.cat([qk[..., :hq, :], k], -2)
            v = v + (w["pv"].value[ids] * inside).unflatten(-1, (hk, d))
        return qk * cos + qk.roll(d // 2, -1) * sin, v

    def _mlp(self, w: dict, x: torch.Tensor) -> torch.Tensor:
        gate, up = _lin(self._norm(x, w["ln2"]), w["gate_up"]).chunk(2, -1)
        return _lin(F.silu(gate) * up, w["down"])

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return _lin(self._norm(x, self.w["head_norm"]), self.w["head"], self.w["head_b"])

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, lens: torch.Tensor, path_ids: torch.Tensor | None,
               cache: RowCache, s: int) -> torch.Tensor:
        """One token per row of rows [0, B): tokens, positions, lens [B] (device) -> logits [B, V]. Reads nothing
        back to the host: every shape is B, s and the model's."""
        b = tokens.shape[0]
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        path_ids = path_ids if self.path_vectors else None
        allowed = _decode_mask(lens, s, self.w["embed"].dtype)
        slots = cache.step_index(lens)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, D]
        x = F.embedding(tokens, self.w["embed"])  # [B, H]
        for li, w in enumerate(self.w["layers"]):
            qk, v = self._qkv(w, x, cos, sin, path_ids)  # [B, Hq + Hk, D], [B, Hk, D]
            cache.write_step(li, slots, torch.cat([qk[:, hq:], v], 1))
            keys, values = cache.layer(li, 0, b, s)
            # The query heads that share a key/value head attend together: [B, Hk, Hq/Hk, D] vs [B, Hk, S, D].
            o = F.scaled_dot_product_attention(qk[:, :hq].reshape(b, hk, hq // hk, d), keys, values,
                                               attn_mask=allowed, scale=w["scale"])
            x = x + _lin(o.reshape(b, hq * d), w["o"], w["o_b"])
            x = x + self._mlp(w, x)
        return self._logits(x)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, positions: torch.Tensor, row0: int, cache: RowCache,
                path_ids: torch.Tensor | None, last: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Fresh right-padded rows row0..: tokens, positions [B, T] -> logits [B, V] at ``last`` [B]; plain causal,
        or ``mask`` [B, 1, T, T] bool (True = may attend: a structured row recomputed)."""
        hq, hk = self.heads, self.kv_heads
        path_ids = path_ids if self.path_vectors else None
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # [B, T, 1, D]
        x = F.embedding(tokens, self.w["embed"])  # [B, T, H]
        for li, w in enumerate(self.w["layers"]):
            qk, v = self._qkv(w, x, cos, sin, path_ids)  # [B, T, Hq + Hk, D], [B, T, Hk, D]
            q, k, v = qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2), v.transpose(1, 2)
            cache.write_prefill(li, row0, k, v)
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1),
                                               attn_mask=mask, is_causal=mask is None, scale=w["scale"])
            x = x + _lin(o.transpose(1, 2).flatten(2), w["o"], w["o_b"])
            x = x + self._mlp(w, x)
        x = x[torch.arange(x.shape[0], device=x.device), last]
        return self._logits(x)


def _keep_addresses(old, new, params: set[int]):
    """``new``, except that each tensor computed from the weights (not a view of a parameter, whose address is
    the parameter's) is copied into its predecessor in ``old`` when their shapes match."""
    if isinstance(new, dict):
        return {k: _keep_addresses(old.get(k) if isinstance(old, dict) else None, v, params) for k, v in new.items()}
    if isinstance(new, (list, tuple)):
        olds = old if isinstance(old, type(new)) and len(old) == len(new) else [None] * len(new)
        return type(new)(_keep_addresses(o, n, params) for o, n in zip(olds, new))
    computed = [isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in params for t in (old, new)]
    if all(computed) and (old.shape, old.dtype, old.device) == (new.shape, new.dtype, new.device):
        return old.copy_(new)
    return new

"""Full-precision master weights for a model whose parameters are bf16 (or fp16).

Why: AdamW's step is about ``lr`` per weight (its moments normalise the gradient). At the paper's RL learning rate,
1e-6, that is far below half a bf16 rounding step of a typical weight (bf16 keeps 8 significant bits: a weight of 0.02
rounds in steps of 1.2e-4), so an optimiser that writes into bf16 parameters rounds the step away: measured on the
tiny model, two such steps changed 0.96% of the weights. Mixed-precision training keeps an fp32 copy of every weight
(the *master*), applies the update there, and rounds only the copy the forward reads (Micikevicius et al. 2018;
DeepSpeed's bf16 optimizer and Megatron's distributed optimizer do the same).

Here: :class:`MasterAdamW` is AdamW over fp32 masters of the model's parameters. The model keeps its bf16 parameters
(the forward, the rollout engine and its KV cache stay bf16: half the memory and bandwidth of fp32); ``step`` casts
the bf16 gradients to fp32, updates the masters and writes them, rounded, into the model. The masters are in the
optimiser's state dict (a resumed run continues from them, not from the rounded weights), and
:func:`full_precision_state` is what a stage publishes, so the next stage starts from the unrounded result.

Gradients are still accumulated in the parameters' dtype across micro-batches (DDP reduces them there); what is
kept whole is the update, which is what rounding destroyed. Under DeepSpeed the engine's own bf16 optimiser keeps
the masters and this class is not used.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

HALF = (torch.bfloat16, torch.float16)


def needs_masters(model) -> bool:
    """True when some trainable parameter is half precision (an optimiser step on it would be rounded)."""
    return any(p.dtype in HALF for p in model.parameters() if p.requires_grad)


def to_half_keeping_masters(model, dtype: torch.dtype) -> list[torch.Tensor]:
    """Cast ``model``'s trainable fp32 parameters to ``dtype`` in place; returns their fp32 values as masters.

    The masters take over the fp32 storage (no copy), so loading a checkpoint in fp32 and calling this costs one fp32
    copy of the model, not two. Buffers keep their dtype, as ``from_pretrained(dtype=...)`` leaves them.
    """
    masters = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.dtype != torch.float32:
            raise ValueError(f"to_half_keeping_masters: expected fp32 parameters, got {p.dtype}")
        master = p.data
        p.data = master.to(dtype)
        masters.append(master)
    return masters


class MasterAdamW(torch.optim.AdamW):
    """AdamW whose parameters are fp32 masters of ``params`` (the model's, any dtype); see the module docstring.

    ``masters``: fp32 starting values, one per parameter in order (from :func:`to_half_keeping_masters`, which keeps
    the digits a bf16 copy lost); by default the parameters' own values, upcast. An fp32 parameter is its own master.
    """

    def __init__(self, params: Iterable[torch.Tensor], masters: list[torch.Tensor] | None = None, **kwargs):
        self.model_params = list(params)
        if masters is None:
            masters = [p.detach().float().clone() if p.dtype != torch.float32 else p for p in self.model_params]
        if len(masters) != len(self.model_params):
            raise ValueError(f"MasterAdamW: {len(masters)} masters for {len(self.model_params)} parameters")
        for p, m in zip(self.model_params, masters):
            if m.shape != p.shape or m.dtype != torch.float32:
                raise ValueError(f"MasterAdamW: a master must be fp32 of shape {tuple(p.shape)}, got "
                                 f"{m.dtype} {tuple(m.shape)}")
        self.masters = [m if m is p else m.detach().to(p.device).requires_grad_(True)
                        for p, m in zip(self.model_params, masters)]
        super().__init__(self.masters, **kwargs)

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("MasterAdamW: closures are not supported")
        for p, m in zip(self.model_params, self.masters):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.float()
        super().step()
        for p, m in zip(self.model_params, self.masters):
            if m is not p:
                p.copy_(m)  # rounded to the model's dtype; the master keeps the digits
                m.grad = None  # the fp32 gradient copy is rebuilt each step: no second fp32 copy of the model held

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=set_to_none)
        for p in self.model_params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def state_dict(self):
        state = super().state_dict()
        state["master_weights"] = [m.detach() for m in self.masters]
        return state

    def load_state_dict(self, state_dict) -> None:
        state_dict = dict(state_dict)
        saved = state_dict.pop("master_weights", None)
        if saved is None:
            raise ValueError("MasterAdamW.load_state_dict: the checkpoint has no master weights (it was written by a "
                             "plain optimiser); resume it with the precision it was trained in")
        if len(saved) != len(self.masters):
            raise ValueError(f"MasterAdamW.load_state_dict: {len(saved)} saved masters for {len(self.masters)} "
                             "parameters")
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for p, m, value in zip(self.model_params, self.masters, saved):
                m.copy_(value)
                if m is not p:
                    p.copy_(m)


def full_precision_state(model, optimizer) -> dict[str, torch.Tensor] | None:
    """The model's state dict with every trained half-precision parameter replaced by its fp32 master, or None
    when ``optimizer`` keeps no masters. ``optimizer`` may be wrapped (accelerate's AcceleratedOptimizer)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(inner, MasterAdamW):
        return None
    by_param = {id(p): m for p, m in zip(inner.model_params, inner.masters)}
    module = getattr(model, "module", model)  # DDP keeps the model as .module
    # keep_vars: the parameters themselves, so that each is found by identity (a tied weight under both its names)
    return {key: by_param.get(id(value), value).detach()
            for key, value in module.state_dict(keep_vars=True).items()}

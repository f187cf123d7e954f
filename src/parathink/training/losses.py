"""Policy losses and loss aggregations of the GRPO family, small pure functions registered by name.

A policy loss turns per-token log-probs into a per-token loss ``[B, T]``; an aggregation reduces it to the
scalar that is back-propagated. Config picks them with ``policy_loss: <name>`` and ``loss_agg: <name>``.

Policy losses:
- ``clipped``: PPO's clipped surrogate as GRPO uses it (DeepSeekMath eq. 3), with DAPO's decoupled
  ``eps_low`` / ``eps_high`` ("clip-higher", Yu et al. 2025 §3.1; Parallel-R1's S2 runs use 0.28 high).
- ``on_policy``: PAPO's strict on-policy objective (NPR §3.3): ratio = pi / sg(pi), which is 1 in value and
  carries the gradient of log pi; no clipping, so no token (the special tags included, whose probabilities
  move fastest) ever loses its gradient to a clip mask.

Aggregations (what a token weighs):
- ``token_mean``: DAPO's token-level loss (§3.3): every response token of the batch counts the same.
- ``seq_mean``: GRPO's sample-level loss: mean over each response's tokens, then over responses.

Both take the denominator from the caller (``normaliser``) so that a batch split into micro-batches sums to
exactly the loss of the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from parathink.registries import Registry

PolicyLossFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
AggregationFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")
register_policy_loss = POLICY_LOSSES.register
register_aggregation = AGGREGATIONS.register
# How each aggregation counts its normaliser over a whole (mini-)batch: tokens or responses.
NORMALISERS: dict[str, Callable[[torch.Tensor], float]] = {
    "token_mean": lambda mask: float(mask.sum().clamp(min=1.0)),
    "seq_mean": lambda mask: float(mask.shape[0]),
}


def get_policy_loss(name: str) -> PolicyLossFn:
    return POLICY_LOSSES[name]


def get_aggregation(name: str) -> AggregationFn:
    return AGGREGATIONS[name]


@register_policy_loss("clipped")
def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                      eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-min(r A, clip(r, 1-eps_low, 1+eps_high) A) per token; also the bool [B, T] of clipped tokens.

    logp, old_logp: [B, T]; advantages: [B] (one per response, broadcast over its tokens).
    """
    adv = advantages.unsqueeze(-1)  # [B, 1]
    ratio = torch.exp(logp - old_logp)  # [B, T]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)  # [B, T]
    # A token is clipped when the clipped branch is the smaller one strictly: its gradient is then zero.
    was_clipped = clipped < unclipped  # [B, T]
    return loss, was_clipped


@register_policy_loss("on_policy")
def strict_on_policy(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                     eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PAPO: -(pi / sg(pi)) A per token. ``old_logp`` and the eps are ignored: the ratio is 1 by construction."""
    ratio = torch.exp(logp - logp.detach())  # [B, T], == 1, d/dθ = d log pi / dθ
    loss = -ratio * advantages.unsqueeze(-1)
    return loss, torch.zeros_like(loss, dtype=torch.bool)


@register_aggregation("token_mean")
def token_mean(per_token: torch.Tensor, mask: torch.Tensor, normaliser: float) -> torch.Tensor:
    """Sum over every response token of the batch / number of response tokens of the whole batch."""
    return (per_token * mask).sum() / normaliser


@register_aggregation("seq_mean")
def seq_mean(per_token: torch.Tensor, mask: torch.Tensor, normaliser: float) -> torch.Tensor:
    """Per response: mean over its tokens; then the sum over responses / number of responses of the batch."""
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
    return per_seq.sum() / normaliser


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate, Schulman's k3: exp(q - p) - (q - p) - 1 >= 0 (DeepSeekMath eq. 4)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


@dataclass(frozen=True)
class LossSpec:
    """Which loss, how it aggregates, and its coefficients (the trainer builds it from the stage config)."""

    policy_loss: str = "clipped"
    loss_agg: str = "token_mean"
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_coef: float = 0.0


def grpo_loss(spec: LossSpec, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, normaliser: float, ref_logp: torch.Tensor | None = None,
              is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The scalar loss of one (micro-)batch and detached statistics summed over its tokens.

    logp, old_logp, mask, ref_logp, is_weights: [B, T]; advantages: [B]. Statistics are sums (``clipped``, ``kl``,
    ``tokens``) so that the caller can add them over micro-batches before dividing. ``is_weights`` (no gradient)
    scale each token's policy loss: the truncated importance-sampling correction of rollouts another engine
    sampled (training.rl: ``rollout.tis_cap``).
    """
    per_token, was_clipped = get_policy_loss(spec.policy_loss)(logp, old_logp, advantages, spec.eps_low, spec.eps_high)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    stats = {"tokens": mask.sum().detach(), "clipped": (was_clipped.float() * mask).sum().detach()}
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)  # [B, T]
        stats["kl"] = (kl.detach() * mask).sum()
        if spec.kl_coef:
            per_token = per_token + spec.kl_coef * kl
    loss = get_aggregation(spec.loss_agg)(per_token, mask, normaliser)
    return loss, stats

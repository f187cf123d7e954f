"""Group-relative advantage estimators of the GRPO family, registered by name.

Every estimator takes the scalar rewards of one step laid out group by group (``[N, G]``: N prompts, G
rollouts each) and returns one advantage per rollout of the same shape. The trainer broadcasts it over the
rollout's tokens. Config picks one with ``advantage: <name>``.

- ``group_std``: GRPO (Shao et al. 2024, DeepSeekMath §4.1.2), (r - mean_group) / (std_group + eps).
- ``batch_std``: PAPO (NPR, §3.3), (r - mean_group) / (std_batch + eps): one scale for the whole batch, so a
  group whose rewards barely differ is not blown up to unit variance.
- ``none``: Dr. GRPO (Liu et al. 2025) and nanochat's chat_rl, r - mean_group, no scaling at all.
"""

from __future__ import annotations

from typing import Callable

import torch

AdvantageFn = Callable[[torch.Tensor, float], torch.Tensor]

ADVANTAGES: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    def wrap(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES[name] = fn
        return fn

    return wrap


def get_advantage(name: str) -> AdvantageFn:
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGES)}") from None


def _centred(rewards: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [prompts, group>=2], got shape {tuple(rewards.shape)}")
    return rewards - rewards.mean(dim=1, keepdim=True)  # [N, G]


@register_advantage("group_std")
def group_std(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: each group centred and scaled by its own (unbiased) std. [N, G] -> [N, G]."""
    centred = _centred(rewards)
    std = rewards.std(dim=1, keepdim=True)  # [N, 1]
    return centred / (std + eps)


@register_advantage("batch_std")
def batch_std(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """PAPO: centred per group, scaled by the std of every reward of the batch. [N, G] -> [N, G]."""
    centred = _centred(rewards)
    std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())
    return centred / (std + eps)


@register_advantage("none")
def no_scaling(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO / nanochat: centred per group, not scaled. [N, G] -> [N, G]."""
    return _centred(rewards)


def zero_variance_groups(rewards: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """Bool [N]: groups whose rollouts all scored the same, so their advantages are all zero.

    DAPO's dynamic sampling (Yu et al. 2025, §3.2) drops them: they add tokens to the loss's denominator
    and nothing to its gradient.
    """
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) <= tol

"""Group-relative advantage estimators of the GRPO family, registered by name (verl's core_algos habit).

Every estimator takes the scalar rewards of one step as a flat vector ``[M]`` with the group (problem) index
of each rollout ``[M]``, and returns one advantage per rollout ``[M]``; the trainer broadcasts it over the
rollout's tokens. Groups may differ in size (after PAPO drops broken rollouts), but each needs >= 2 members.
Config picks one with ``advantage: <name>``.

- ``group_std``: GRPO (DeepSeekMath §4.1.2), (r - mean_group) / (std_group + eps).
- ``batch_std``: PAPO (NPR §3.3), (r - mean_group) / (std_batch + eps): one scale for the whole batch, so a
  group whose rewards barely differ is not blown up to unit variance.
- ``none``: Dr. GRPO (Liu et al. 2025) and nanochat's chat_rl, r - mean_group, no scaling at all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from parathink.registries import Registry

AdvantageFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
register_advantage = ADVANTAGES.register


def get_advantage(name: str) -> AdvantageFn:
    return ADVANTAGES[name]


def group_stats(rewards: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-rollout group mean and unbiased group std, both [M]. ``groups`` holds ids 0..n-1, each >= 2 times."""
    if rewards.dim() != 1 or rewards.shape != groups.shape:
        raise ValueError(f"rewards and groups must both be [M], got {tuple(rewards.shape)} and {tuple(groups.shape)}")
    n = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, torch.ones_like(rewards))  # [n]
    if bool((count < 2).any()):
        bad = int(torch.nonzero(count < 2)[0])
        raise ValueError(f"group {bad} has {int(count[bad])} rollout(s); every group needs >= 2")
    mean = torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, rewards) / count  # [n]
    sq = (rewards - mean[groups]) ** 2  # [M]
    std = (torch.zeros(n, dtype=rewards.dtype).index_add_(0, groups, sq) / (count - 1)).sqrt()  # [n]
    return mean[groups], std[groups]


@register_advantage("group_std")
def group_std(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: each group centred and scaled by its own std. [M] -> [M]."""
    mean, std = group_stats(rewards, groups)
    return (rewards - mean) / (std + eps)


@register_advantage("batch_std")
def batch_std(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """PAPO: centred per group, scaled by the std of every reward of the batch. [M] -> [M]."""
    mean, _ = group_stats(rewards, groups)
    return (rewards - mean) / (rewards.std() + eps)


@register_advantage("none")
def no_scaling(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO / nanochat: centred per group, not scaled. [M] -> [M]."""
    mean, _ = group_stats(rewards, groups)
    return rewards - mean


def zero_variance(rewards: torch.Tensor, groups: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """Bool [M]: rollouts whose whole group scored the same, so their advantages are all zero.

    DAPO's dynamic sampling (Yu et al. 2025, §3.2) drops them: they add tokens to the loss's denominator and
    nothing to its gradient.
    """
    _, std = group_stats(rewards, groups)
    return std <= tol

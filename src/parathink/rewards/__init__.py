"""Reward functions and schedules (docs/design.md, Grading and rewards), a registry chosen by name.

Every reward is ``fn(trace, correct, step) -> float`` with ``step`` counted from 1, so schedules that change
with the training step (alternating, scaffold) have the same signature as the plain ones. Parameters (the
scaffold's switch step, the alternating period) are bound by ``get_reward(name, **params)``.
"""

from __future__ import annotations

from parathink.rewards.schemes import REWARDS, RewardFn, get_reward, register

__all__ = ["REWARDS", "RewardFn", "get_reward", "register"]

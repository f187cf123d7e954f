"""The reward schemes of Parallel-R1 (§3.3, §4.3) and NPR (§3.1)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from parathink.formats.trace import Trace
from parathink.registries import Registry


class RewardFn(Protocol):
    def __call__(self, trace: Trace, correct: bool, step: int) -> float: ...


REWARDS: Registry[Callable[..., float]] = Registry("reward scheme")
register = REWARDS.register


def get_reward(name: str, **params: int | float) -> RewardFn:
    """The reward function registered as ``name`` with its parameters bound."""
    fn = REWARDS[name]
    return functools.partial(fn, **params) if params else fn  # type: ignore[return-value]


def _acc(correct: bool) -> float:
    return 1.0 if correct else -1.0


@register("accuracy")
def accuracy(trace: Trace, correct: bool, step: int) -> float:
    """R_acc: +1 correct, -1 otherwise (rl_hard, grpo_baseline)."""
    return _acc(correct)


@register("parallel_x_accuracy")
def parallel_x_accuracy(trace: Trace, correct: bool, step: int) -> float:
    """R_parallel x R_acc (Parallel-R1's RL on easy problems): +1 only when the trace is parallel AND correct."""
    return 1.0 if trace.parallel and correct else -1.0


@register("tiered")
def tiered(trace: Trace, correct: bool, step: int, parallel_bonus: float = 1.2) -> float:
    """The S2 window reward: +1.2 parallel and correct, +1.0 correct without a block, -1 otherwise.

    A correct answer wrapped in a malformed block earns -1: the format must be right to count as parallel.
    """
    if not correct or not trace.valid:
        return -1.0
    return parallel_bonus if trace.blocks else 1.0


@register("alternating")
def alternating(trace: Trace, correct: bool, step: int, period: int = 10, accuracy_steps: int = 8) -> float:
    """S2 (§4.3): in each window of ``period`` steps, the first ``accuracy_steps`` use R_acc, the rest tiered."""
    if step < 1:
        raise ValueError(f"reward step counts from 1, got {step}")
    if (step - 1) % period < accuracy_steps:
        return accuracy(trace, correct, step)
    return tiered(trace, correct, step)


@register("scaffold")
def scaffold(trace: Trace, correct: bool, step: int, switch_step: int = 200, period: int = 10,
             accuracy_steps: int = 8) -> float:
    """Alternating for steps <= ``switch_step`` (the scaffold), plain accuracy after."""
    if step <= switch_step:
        return alternating(trace, correct, step, period=period, accuracy_steps=accuracy_steps)
    return accuracy(trace, correct, step)


@register("npr_format")
def npr_format(trace: Trace, correct: bool, step: int) -> float:
    """NPR-Zero: a format that passes scores 0 and then earns R_acc; a broken one scores in (-2, 0].

    The format passes when the trace is parallel (valid, at least one block: NPR wants the structure
    used). The failure score falls with the number of distinct problems, -1 - e/(e+1) with a missing block
    counted as one, which stays in [-1.5, -2): always below a well-formed wrong answer, so the format is
    learnt first. PAPO drops such rollouts before the update anyway; the score matters for NPR-Zero.
    """
    if trace.parallel:
        return _acc(correct)
    e = max(1, len(trace.errors))
    return -1.0 - e / (e + 1)

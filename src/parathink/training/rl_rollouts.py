"""From sampled responses to the numbers GRPO trains on: rewards, groups, advantages, what is dropped.

Pure functions over plain data (no model, no engine), so the bookkeeping that decides every gradient is tested
exhaustively on its own. The loop in ``rl.py`` calls them in this order: ``score`` each rollout, ``assemble``
the step (advantages per group, drops), then ``step_metrics`` for the tracker.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from parathink.formats import Trace
from parathink.formats.metrics import summarize
from parathink.scoring import score_completion
from parathink.training.advantages import get_advantage, zero_variance


@dataclass
class Rollout:
    """One sampled response and its score. ``sample`` is the engine's object (ids, log-probs, loss mask)."""

    group: int  # index of its problem within the step
    sample: Any
    text: str
    trace: Trace
    correct: bool
    reward: float
    n_tokens: int  # generated tokens, every branch counted
    advantage: float = 0.0


@dataclass
class StepBatch:
    """The rollouts one step trains on, and what was left out and why."""

    rollouts: list[Rollout]  # kept, with advantages set
    all_rollouts: list[Rollout]  # everything sampled (for metrics)
    dropped_invalid: int = 0
    dropped_zero_variance: int = 0  # rollouts (not groups) dropped
    nan_reward: bool = False
    groups_kept: int = 0


def problems_for_step(n_problems: int, per_step: int, step: int, seed: int) -> list[int]:
    """Indices of the problems of ``step`` (from 1): epochs over a seeded shuffle, a pure function of its arguments.

    Being pure is what makes resume exact: step s draws the same problems whether or not the run was killed.
    """
    start = (step - 1) * per_step
    return [_epoch_order(n_problems, seed, pos // n_problems)[pos % n_problems]
            for pos in range(start, start + per_step)]


@functools.lru_cache(maxsize=4)
def _epoch_order(n_problems: int, seed: int, epoch: int) -> tuple[int, ...]:
    """One epoch's seeded shuffle, made once: shuffling 20,000 problems for each of a step's 16 draws cost 0.1-0.2 s
    a step, a tenth of grpo_baseline's."""
    order = list(range(n_problems))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return tuple(order)


def score(group: int, sample: Any, text: str, gold: Any, grammar: str,
          reward_fn: Callable[[Trace, bool, int], float], step: int) -> Rollout:
    """Parse, grade and reward one response (docs/design.md, Grading and rewards) on the one score path
    (``parathink.scoring``), which the trace filter and ``parathink score`` take too."""
    scored = score_completion(text, grammar, gold, reward=reward_fn, step=step)
    return Rollout(group=group, sample=sample, text=text, trace=scored.trace, correct=bool(scored.correct),
                   reward=float(scored.reward), n_tokens=len(sample.response_ids))


def assemble(rollouts: Sequence[Rollout], group_size: int, advantage: str, drop_zero_variance: bool,
             drop_invalid_format: bool) -> StepBatch:
    """Group the step's rollouts, compute advantages, and apply the configured drops.

    Order matters and follows NPR (§3.3): rollouts that break the format are dropped first (PAPO filters them
    out of the update entirely), then advantages are computed over what remains of each group. A group left with
    fewer than two rollouts has no baseline and is dropped. Zero-variance groups (DAPO §3.2) go last.
    A NaN reward anywhere marks the step for skipping: no advantage is computed from it.
    """
    batch = StepBatch(rollouts=[], all_rollouts=list(rollouts))
    if any(not math.isfinite(r.reward) for r in rollouts):
        batch.nan_reward = True
        return batch
    groups: dict[int, list[Rollout]] = {}
    for r in rollouts:
        if drop_invalid_format and not r.trace.valid:
            batch.dropped_invalid += 1
            continue
        groups.setdefault(r.group, []).append(r)
    # A group left with one rollout has no baseline: it goes too (counted with the format drops that caused it).
    kept = [g for _, g in sorted(groups.items()) if len(g) >= 2]
    batch.dropped_invalid += sum(len(g) for g in groups.values() if len(g) < 2)
    if not kept:
        return batch
    flat = [r for g in kept for r in g]
    rewards = torch.tensor([r.reward for r in flat], dtype=torch.float64)  # [M]
    ids = torch.tensor([i for i, g in enumerate(kept) for _ in g])  # [M]
    adv = get_advantage(advantage)(rewards, ids, 1e-6)  # [M]
    flat_group = zero_variance(rewards, ids)  # [M]
    for r, a, is_flat in zip(flat, adv.tolist(), flat_group.tolist()):
        # A flat group's advantages are zero up to float residue (a mean of 0.2s is not exactly 0.2); make them
        # exactly zero, so the update may leave them out of the forward without changing the gradient.
        r.advantage = 0.0 if is_flat else float(a)
        if drop_zero_variance and is_flat:
            batch.dropped_zero_variance += 1
        else:
            batch.rollouts.append(r)
    batch.groups_kept = len({r.group for r in batch.rollouts})
    return batch


def step_metrics(batch: StepBatch, tokenizer: Any = None) -> dict[str, float]:
    """Reward, accuracy and the paper's behaviour metrics over every rollout sampled this step."""
    rs = batch.all_rollouts
    rewards = torch.tensor([r.reward for r in rs], dtype=torch.float64)
    fmt = summarize([r.trace for r in rs], tokenizer)
    finite = rewards[torch.isfinite(rewards)]
    return {
        "reward_mean": float(finite.mean()) if finite.numel() else float("nan"),
        "reward_std": float(finite.std()) if finite.numel() > 1 else 0.0,
        "accuracy": sum(r.correct for r in rs) / max(1, len(rs)),
        "valid_rate": fmt.valid_rate,
        "parallel_rate": fmt.parallel_rate,
        "relative_position": fmt.relative_position if fmt.relative_position is not None else float("nan"),
        "blocks_per_trace": fmt.blocks_per_trace,
        "response_length": sum(r.n_tokens for r in rs) / max(1, len(rs)),
        "dropped_invalid": float(batch.dropped_invalid),
        "dropped_zero_variance": float(batch.dropped_zero_variance),
        "rollouts_trained": float(len(batch.rollouts)),
    }

"""The pure bookkeeping of an RL step: problem order, scoring, drops, advantages, metrics."""

import math
from types import SimpleNamespace

import pytest

from parathink.rewards import get_reward
from parathink.training.rl_rollouts import assemble, problems_for_step, score, step_metrics

PAR = "<Parallel><Path>3+4=7</Path><Path>4+3=7</Path></Parallel><Summary>7</Summary>\n\\boxed{7}"
SEQ = "3 + 4 = 7\n\\boxed{7}"
WRONG = "3 + 4 = 8\n\\boxed{8}"
BROKEN = "<Parallel><Path>3+4=7</Path></Parallel>\n\\boxed{7}"  # one path: invalid


def _sample(n_tokens=5):
    return SimpleNamespace(response_ids=list(range(n_tokens)))


def _group(g, texts, reward="accuracy", step=1):
    fn = get_reward(reward)
    return [score(g, _sample(), t, 7, "parallel_r1", fn, step) for t in texts]


def test_problems_for_step_is_pure_and_covers_an_epoch_without_repeats():
    a = [problems_for_step(10, 3, s, seed=1) for s in range(1, 5)]
    b = [problems_for_step(10, 3, s, seed=1) for s in range(1, 5)]
    assert a == b
    first_epoch = [i for s in a for i in s][:10]
    assert sorted(first_epoch) == list(range(10))
    assert problems_for_step(10, 3, 1, seed=2) != a[0] or problems_for_step(10, 3, 2, seed=2) != a[1]


def test_score_grades_parses_and_rewards():
    r = _group(0, [PAR, SEQ, WRONG, BROKEN], reward="parallel_x_accuracy")
    assert [x.correct for x in r] == [True, True, False, True]
    assert [x.trace.parallel for x in r] == [True, False, False, False]
    assert [x.reward for x in r] == [1.0, -1.0, -1.0, -1.0]


def test_assemble_group_std_and_zero_variance_drop():
    rollouts = _group(0, [SEQ, WRONG, WRONG, WRONG]) + _group(1, [SEQ, SEQ, SEQ, SEQ])
    kept = assemble(rollouts, 4, "group_std", drop_zero_variance=False, drop_invalid_format=False)
    assert len(kept.rollouts) == 8 and kept.dropped_zero_variance == 0
    assert [round(r.advantage, 3) for r in kept.rollouts[:4]] == [1.5, -0.5, -0.5, -0.5]
    assert all(r.advantage == 0 for r in kept.rollouts[4:])
    dropped = assemble(rollouts, 4, "group_std", drop_zero_variance=True, drop_invalid_format=False)
    assert len(dropped.rollouts) == 4 and dropped.dropped_zero_variance == 4 and dropped.groups_kept == 1


def test_assemble_drops_broken_format_before_advantages():
    # group 0 loses one rollout (advantages over the three left); group 1 keeps one rollout only: dropped too
    rollouts = _group(0, [PAR, BROKEN, WRONG, SEQ]) + _group(1, [BROKEN, BROKEN, BROKEN, PAR])
    batch = assemble(rollouts, 4, "none", drop_zero_variance=False, drop_invalid_format=True)
    assert [r.text for r in batch.rollouts] == [PAR, WRONG, SEQ]
    assert batch.dropped_invalid == 5
    assert [round(r.advantage, 3) for r in batch.rollouts] == [round(2 / 3, 3), round(-4 / 3, 3), round(2 / 3, 3)]


def test_nan_reward_marks_the_step_and_computes_nothing():
    rollouts = _group(0, [SEQ, WRONG])
    rollouts[1].reward = float("nan")
    batch = assemble(rollouts, 2, "group_std", False, False)
    assert batch.nan_reward and batch.rollouts == []


def test_step_metrics_over_everything_sampled():
    rollouts = _group(0, [PAR, SEQ, WRONG, BROKEN])
    batch = assemble(rollouts, 4, "group_std", False, True)
    m = step_metrics(batch)
    assert m["accuracy"] == 0.75 and m["parallel_rate"] == 0.25 and m["valid_rate"] == 0.75
    assert m["reward_mean"] == pytest.approx(0.5) and m["response_length"] == 5
    assert m["blocks_per_trace"] == 1 and 0 <= m["relative_position"] < 1
    assert m["dropped_invalid"] == 1 and m["rollouts_trained"] == 3
    assert math.isnan(step_metrics(assemble(_group(0, [SEQ, WRONG]), 2, "none", False, False))["relative_position"])

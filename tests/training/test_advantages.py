"""Advantage estimators: exact values on small groups, and the properties every estimator must keep."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parathink.training.advantages import ADVANTAGES, get_advantage, zero_variance


def _flat(groups):
    r = torch.tensor([x for g in groups for x in g], dtype=torch.float64)
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    return r, ids


def test_group_std_matches_hand_computation():
    r, ids = _flat([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])
    adv = get_advantage("group_std")(r, ids, 0.0)
    # group 0: mean -0.5, unbiased std 1.0; group 1: mean 0, unbiased std 2/sqrt(3)
    s = 2 / 3**0.5
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 1 / s, 1 / s, -1 / s, -1 / s], dtype=torch.float64)
    assert torch.allclose(adv, expected)


def test_groups_of_different_sizes_are_handled_separately():
    r, ids = _flat([[1.0, -1.0], [1.0, 1.0, -1.0]])
    adv = get_advantage("none")(r, ids, 0.0)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 2 / 3, 2 / 3, -4 / 3], dtype=torch.float64))


def test_batch_std_uses_one_scale_for_the_whole_batch():
    r, ids = _flat([[1.0, -1.0], [0.1, 0.0]])
    adv = get_advantage("batch_std")(r, ids, 0.0)
    centred = torch.tensor([1.0, -1.0, 0.05, -0.05], dtype=torch.float64)
    assert torch.allclose(adv, centred / r.std())
    # unlike group_std, the nearly flat group keeps small advantages
    assert adv[2:].abs().max() < adv[:2].abs().max() / 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1.0, 1.0, 1.2, 0.0]), min_size=2, max_size=6), min_size=1, max_size=4),
       st.sampled_from(sorted(ADVANTAGES)))
def test_every_estimator_centres_each_group_and_zeroes_flat_groups(groups, name):
    r, ids = _flat(groups)
    adv = get_advantage(name)(r, ids, 1e-6)
    assert adv.shape == r.shape
    for g in range(len(groups)):
        sel = ids == g
        assert abs(float(adv[sel].sum())) < 1e-4
        # order is kept: a better reward never gets a smaller advantage within its group
        order = torch.argsort(r[sel])
        assert torch.all(adv[sel][order][1:] >= adv[sel][order][:-1] - 1e-6)
    assert torch.all(adv[zero_variance(r, ids)] == 0)


def test_unknown_estimator_and_lonely_group_are_clear():
    with pytest.raises(KeyError, match="unknown advantage estimator 'gae'"):
        get_advantage("gae")
    r, ids = _flat([[1.0, 0.0], [1.0]])
    with pytest.raises(ValueError, match="group 1 has 1 rollout"):
        get_advantage("group_std")(r, ids, 1e-6)

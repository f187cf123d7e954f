"""Advantage estimators: exact values on small groups, and the properties every estimator must keep."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parathink.training.advantages import ADVANTAGES, get_advantage, zero_variance_groups


def test_group_std_matches_hand_computation():
    r = torch.tensor([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])
    adv = get_advantage("group_std")(r, 0.0)
    # group 0: mean -0.5, unbiased std 1.0
    assert torch.allclose(adv[0], torch.tensor([1.5, -0.5, -0.5, -0.5]))
    # group 1: mean 0, unbiased std 2/sqrt(3)
    s = 2 / 3**0.5
    assert torch.allclose(adv[1], torch.tensor([1 / s, 1 / s, -1 / s, -1 / s]))


def test_batch_std_uses_one_scale_for_the_whole_batch():
    r = torch.tensor([[1.0, -1.0], [0.1, 0.0]])
    adv = get_advantage("batch_std")(r, 0.0)
    scale = r.std()
    assert torch.allclose(adv, (r - r.mean(1, keepdim=True)) / scale)
    # unlike group_std, the nearly flat group keeps small advantages
    assert adv[1].abs().max() < adv[0].abs().max() / 5


def test_none_only_centres():
    r = torch.tensor([[3.0, 1.0, 2.0]])
    assert torch.allclose(get_advantage("none")(r, 1e-6), torch.tensor([[1.0, -1.0, 0.0]]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1.0, 1.0, 1.2, 0.0]), min_size=2, max_size=6), min_size=1, max_size=4)
       .filter(lambda g: len({len(x) for x in g}) == 1),
       st.sampled_from(sorted(ADVANTAGES)))
def test_every_estimator_centres_each_group_and_zeroes_flat_groups(groups, name):
    r = torch.tensor(groups)
    adv = get_advantage(name)(r, 1e-6)
    assert adv.shape == r.shape
    assert torch.allclose(adv.sum(1), torch.zeros(r.shape[0]), atol=1e-4)
    flat = zero_variance_groups(r)
    assert torch.all(adv[flat] == 0)
    # order is kept: a better reward never gets a smaller advantage within its group
    for row_r, row_a in zip(r, adv):
        order = torch.argsort(row_r)
        assert torch.all(row_a[order][1:] >= row_a[order][:-1] - 1e-6)


def test_unknown_estimator_and_bad_shape_are_clear():
    with pytest.raises(KeyError, match="unknown advantage estimator 'gae'"):
        get_advantage("gae")
    with pytest.raises(ValueError, match="group>=2"):
        get_advantage("group_std")(torch.tensor([[1.0], [0.0]]), 1e-6)

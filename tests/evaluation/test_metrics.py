"""Scoring functions against brute force and hand-computed values."""

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parathink.evaluation import metrics as M


def brute_pass_at_k(n, c, k):
    """Fraction of all k-subsets of n samples (c correct) that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_unbiased(nck):
    n, c, k = nck
    assert M.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))


def test_pass_at_k_edges_and_errors():
    assert M.pass_at_k(16, 0, 16) == 0.0
    assert M.pass_at_k(16, 1, 16) == 1.0
    assert M.pass_at_k(16, 4, 1) == pytest.approx(0.25)
    for bad in [(4, 5, 1), (4, 1, 5), (4, 1, 0)]:
        with pytest.raises(ValueError):
            M.pass_at_k(*bad)


def test_mean_best_and_majority():
    correct = [[True, False, False, False], [False, False, False, False], [True, True, True, False]]
    assert M.mean_at_k(correct) == pytest.approx((0.25 + 0 + 0.75) / 3)
    assert M.best_at_k(correct, 4) == pytest.approx(2 / 3)
    assert M.best_at_k(correct, 1) == pytest.approx(2 / 3)  # first samples: T, F, T
    assert M.mean_pass_at_k(correct, 4) == pytest.approx(2 / 3)  # n == k: the unbiased estimate is exact
    answers = [["7", "8", "8", None], ["1", "2", "3", "4"], ["5", "5", "5", "6"]]
    # problem 1 votes 8 (wrong), problem 2 votes 1 (wrong: first seen wins the tie), problem 3 votes 5 (right)
    assert M.maj_at_k(answers, correct, 4) == pytest.approx(1 / 3)
    assert M.majority([None, None]) is None


def test_mean_at_k_matches_sample_mean_when_k_constant():
    rng = random.Random(0)
    correct = [[rng.random() < 0.3 for _ in range(8)] for _ in range(50)]
    flat = [c for row in correct for c in row]
    assert M.mean_at_k(correct) == pytest.approx(sum(flat) / len(flat))


def test_paired_difference_by_hand():
    # differences 0.25, 0.0, -0.125, 0.375: mean 0.125; sample var = (0.015625+0.015625+0.0625+0.0625)/3
    delta, se = M.paired_difference([0.5, 0.25, 0.0, 1.0], [0.25, 0.25, 0.125, 0.625])
    assert delta == pytest.approx(0.125)
    assert se == pytest.approx(((0.15625 / 3) / 4) ** 0.5)
    assert M.paired_difference([0.5, 0.5], [0.25, 0.25]) == (0.25, 0.0)  # the same gain everywhere: no doubt
    with pytest.raises(ValueError, match="equally long"):
        M.paired_difference([0.5, 0.5], [0.5])

"""Scores of sampled responses (Parallel-R1 §4.1 "Evaluation"; Chen et al. 2021 for pass@k).

All pure functions over per-problem verdicts, so that the eval stage, tests and notebooks score alike:
- mean@k: the mean accuracy of k samples per problem, averaged over problems (the paper's mean@16);
- pass@k: unbiased estimator 1 - C(n-c, k) / C(n, k) from n >= k samples with c correct (Codex paper, eq. 1);
- best@k: oracle best-of-k, the plain estimate "any of the first k samples is correct" (equals pass@k
  when exactly k samples were drawn; differs, with more variance, when n > k);
- maj@k: majority vote over the first k extracted answers (ties broken by first occurrence);
- paired difference: two models' mean@k on the same problems, with the standard error of the per-problem
  differences (what "a stage gained N points over its start" rests on);
- behaviour: parallel rate, mean relative position (over parallel traces), blocks per trace, response length,
  computed by ``parathink.formats.metrics`` (docs/design.md, Formats (metrics)) — not re-implemented here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def mean_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """Mean over problems of each problem's sample accuracy."""
    if not correct:
        return 0.0
    return sum(sum(row) / len(row) for row in correct) / len(correct)


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    return sum(pass_at_k(len(row), sum(row), k) for row in correct) / len(correct) if correct else 0.0


def best_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    return sum(any(row[:k]) for row in correct) / len(correct) if correct else 0.0


def majority(answers: Sequence[str | None]) -> str | None:
    """Most frequent non-empty answer (first seen wins a tie); None when no sample has an answer."""
    seen = [a for a in answers if a]
    if not seen:
        return None
    counts = Counter(seen)
    top = max(counts.values())
    return next(a for a in seen if counts[a] == top)


def maj_at_k(answers: Sequence[Sequence[str | None]], correct: Sequence[Sequence[bool]], k: int) -> float:
    """Accuracy of the majority answer of the first k samples; a voted answer is correct when a sample
    that gave it was graded correct (grading already decided equivalence with the gold answer)."""
    if not answers:
        return 0.0
    hits = 0
    for ans, ok in zip(answers, correct):
        vote = majority(ans[:k])
        hits += vote is not None and any(a == vote and c for a, c in zip(ans[:k], ok[:k]))
    return hits / len(answers)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of a - b over problems scored by both models, and its standard error (sample std / sqrt(n)).

    ``a`` and ``b`` are per-problem accuracies in the same problem order. Pairing by problem removes the
    problems' own spread in difficulty, which dominates the noise of either mean alone.
    """
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired_difference needs two equally long lists of >= 2 problems; got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, (var / len(d)) ** 0.5

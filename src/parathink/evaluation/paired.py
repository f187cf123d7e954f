"""Two models scored on the same problems: each problem's row of figures, and their paired differences.

A promotion decides on the difference of two models' means over the same problems (``metrics.paired_difference``):
pairing removes the problems' own spread in difficulty. Every figure of a set's row (``evaluate.summarize_set``)
has a per-problem value, the row of that problem alone, so any key of results.json (accuracy, pass_at_k,
parallel_rate, valid_rate, ...) can be compared or guarded the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from parathink.evaluation.evaluate import summarize_set
from parathink.evaluation.metrics import paired_difference


def per_problem(problems: Sequence[dict], k: int, grammar: str) -> dict[str, dict]:
    """{problem id: the row of that problem alone} (``summarize_set`` over one problem)."""
    return {str(p["id"]): summarize_set([p], k, grammar) for p in problems}


def _number(row: dict, key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(candidate: dict[str, dict], champion: dict[str, dict], key: str) -> dict | None:
    """The candidate's and the champion's means of ``key`` over the problems both have a value for, the paired
    difference (candidate - champion) and its standard error; None with fewer than two such problems (a key such as
    relative_position has no value on a problem without a parallel sample)."""
    ids = [i for i in candidate if i in champion
           and _number(candidate[i], key) is not None and _number(champion[i], key) is not None]
    if len(ids) < 2:
        return None
    a = [_number(candidate[i], key) for i in ids]
    b = [_number(champion[i], key) for i in ids]
    delta, se = paired_difference(a, b)
    return {"candidate": sum(a) / len(a), "champion": sum(b) / len(b), "delta": delta, "se": se,
            "n_problems": len(ids)}

"""Answer extraction (last \\boxed{}, else a 'Final Answer:' line) and equivalence through math-verify."""

from __future__ import annotations

from parathink.grading.extract import extract_answer
from parathink.grading.verify import check_gold, is_correct


def grade(response: str, gold: str | int | float) -> tuple[str | None, bool]:
    """(extracted answer, correct?) of a response against the gold answer (a string or a number)."""
    check_gold(gold)
    extracted = extract_answer(response)
    return extracted, is_correct(extracted, gold)


__all__ = ["extract_answer", "grade", "is_correct"]

"""Scoring of response records: format verdicts, behaviour metrics, grading and reward.

This is what ``parathink score`` runs and what the filter and RL reward code share; it must stay cheap:
parsing is one regex scan, and grading only happens when a gold answer is present.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parathink import jsonl
from parathink.errors import BadInput
from parathink.formats import parse
from parathink.formats.metrics import relative_position
from parathink.grading import grade
from parathink.rewards import RewardFn


class InputError(BadInput):
    """A bad input file or record; the message names the file and line."""


def score_record(record: dict[str, Any], grammar: str = "parallel_r1", reward: RewardFn | None = None,
                 step: int = 1) -> dict[str, Any]:
    trace = parse(record["response"], grammar)
    out: dict[str, Any] = {
        "valid": trace.valid,
        "parallel": trace.parallel,
        "blocks": len(trace.blocks),
        "errors": trace.errors,
        "relative_position": relative_position(trace),
    }
    if "answer" in record and record["answer"] is not None:
        extracted, correct = grade(record["response"], record["answer"])
        out["extracted"] = extracted
        out["correct"] = correct
        if reward is not None:
            out["reward"] = reward(trace, correct, step)
    return out


def read_records(path: str | Path, need_answer: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line; raises InputError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    for lineno, rec in jsonl.read(path, error=InputError):
        if not isinstance(rec.get("response"), str):
            raise InputError(f"{path}:{lineno}: record has no string 'response' field")
        if need_answer and rec.get("answer") is None:
            raise InputError(f"{path}:{lineno}: record has no 'answer' field (needed to compute a reward)")
        answer = rec.get("answer")
        if answer is not None and (not isinstance(answer, (str, int, float)) or isinstance(answer, bool)):
            raise InputError(f"{path}:{lineno}: 'answer' must be a string or a number, got {type(answer).__name__}")
        yield lineno, rec


@dataclass
class ScoreSummary:
    n: int = 0
    valid: int = 0
    parallel: int = 0
    positions: list[float] = field(default_factory=list)
    graded: int = 0
    correct: int = 0

    def add(self, scored: dict[str, Any]) -> None:
        self.n += 1
        self.valid += scored["valid"]
        self.parallel += scored["parallel"]
        if scored["relative_position"] is not None:
            self.positions.append(scored["relative_position"])
        if "correct" in scored:
            self.graded += 1
            self.correct += scored["correct"]

    def line(self) -> str:
        def rate(k: int, n: int) -> str:
            return f"{k / n:.3f}" if n else "n/a"

        pos = f"{sum(self.positions) / len(self.positions):.3f}" if self.positions else "n/a"
        return (f"n={self.n} valid_rate={rate(self.valid, self.n)} parallel_rate={rate(self.parallel, self.n)} "
                f"relative_position={pos} accuracy={rate(self.correct, self.graded)}")

"""Scoring of response records: format verdicts, behaviour metrics, grading and reward.

``score_completion`` is the one score path: parse a completion under its grammar, grade its final answer, reward
it. ``parathink score`` (``score_record``), the trace filter (``quality.traces.judge``) and the RL rollouts
(``training.rl_rollouts.score``) all call it, so a completion gets the same verdict, answer and reward in each.
It must stay cheap (it runs on every RL rollout): parsing is one regex scan, and grading only happens when asked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parathink import jsonl
from parathink.errors import BadInput
from parathink.formats import Trace, parse
from parathink.formats.metrics import relative_position
from parathink.grading import grade
from parathink.rewards import RewardFn


class InputError(BadInput):
    """A bad input file or record; the message names the file and line."""


@dataclass(frozen=True)
class Score:
    """One completion scored: its parsed trace, and its graded answer and reward where they were computed.

    An ungraded completion has ``extracted`` None and ``correct`` False (what the filter records for a response
    it does not grade); ``reward`` is None unless a reward function was given and the answer graded. It is the
    reward function's value as returned (RL casts it to float for its tensors; ``parathink score`` writes it as is).
    """

    trace: Trace
    graded: bool = False
    extracted: str | None = None
    correct: bool = False
    reward: float | None = None

    @property
    def blocks(self) -> int:
        return len(self.trace.blocks)

    @property
    def empty_paths(self) -> int:
        """Paths of the trace's blocks holding nothing but whitespace."""
        return sum(1 for b in self.trace.blocks for p in b.paths if not p.text.strip())

    @property
    def relative_position(self) -> float | None:
        return relative_position(self.trace)


def score_completion(text: str, grammar: str, answer: str | int | float | None = None, *, grade_answer: bool = True,
                     reward: RewardFn | None = None, step: int = 1) -> Score:
    """Parse ``text`` under ``grammar``; grade it against ``answer`` and reward it (at ``step``, from 1).

    ``grade_answer`` is where the callers differ, on purpose: RL grades every rollout (its problems always have a
    gold answer), ``parathink score`` grades only records that carry an answer (it also scores the format of
    unanswered ones), and the filter grades only responses within its length bounds (one outside is rejected for
    its length, and a pathological one costs no math-verify call). When grading, ``answer`` goes to ``grade`` as
    given: a gold answer that is not a string or a number is refused there with ``ValueError``, None included.
    """
    trace = parse(text, grammar)
    if not grade_answer:
        return Score(trace)
    extracted, correct = grade(text, answer)
    value = reward(trace, correct, step) if reward is not None else None
    return Score(trace, True, extracted, correct, value)


def score_record(record: dict[str, Any], grammar: str = "parallel_r1", reward: RewardFn | None = None,
                 step: int = 1) -> dict[str, Any]:
    """``parathink score``'s line for one record: format facts always; answer, verdict and reward when it has an
    answer (the reward only when a scheme is given)."""
    answer = record.get("answer")
    scored = score_completion(record["response"], grammar, answer, grade_answer=answer is not None, reward=reward,
                              step=step)
    out: dict[str, Any] = {
        "valid": scored.trace.valid,
        "parallel": scored.trace.parallel,
        "blocks": scored.blocks,
        "errors": scored.trace.errors,
        "relative_position": scored.relative_position,
    }
    if scored.graded:
        out["extracted"] = scored.extracted
        out["correct"] = scored.correct
        if reward is not None:
            out["reward"] = scored.reward
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

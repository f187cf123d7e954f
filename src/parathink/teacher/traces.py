"""Building parallel_r1 traces from finished paths (shared by the ``scripted`` and ``self`` teachers).

The trace is kept short and regular for a ~1M-parameter student (CALIBRATION.md, "Cold-start SFT"): each path
ends with its own ``\\boxed{N}``, so its result sits at a fixed place; the summary lists the paths' results in
order and states the vote; the final ``\\boxed{V}`` follows the block. The summary is the weak link at tiny
scale (the model misreads the paths' results), so it is the simplest possible copy-and-vote.
"""

from __future__ import annotations

from collections import Counter

from parathink.formats.tags import TAGS
from parathink.grading import extract_answer

_OPEN, _CLOSE, _PATH, _END_PATH, _SUMMARY, _END_SUMMARY = TAGS["parallel_r1"]


def majority(answers: list[str | None]) -> str | None:
    """The most common answer; ties go to the one seen first (NPR-style self-consistency vote)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def vote_summary(answers: list[str | None]) -> str:
    shown = ", ".join(a if a is not None else "?" for a in answers)
    vote = majority(answers)
    return f"Paths give {shown}.\nMost give {vote}." if vote is not None else f"Paths give {shown}.\nNo answer."


def parallel_block(paths: list[str], summary: str) -> str:
    body = "\n".join(f"{_PATH}\n{p.strip()}\n{_END_PATH}" for p in paths)
    return f"{_OPEN}\n{body}\n{_CLOSE}\n{_SUMMARY}\n{summary.strip()}\n{_END_SUMMARY}"


def voted_trace(paths: list[str], prefix: str = "") -> tuple[str, list[str | None], str | None]:
    """(response, each path's answer, the vote): prefix, one block over ``paths``, then ``\\boxed{vote}``."""
    answers = [extract_answer(p) for p in paths]
    vote = majority(answers)
    response = (prefix.rstrip() + "\n" if prefix.strip() else "") + parallel_block(paths, vote_summary(answers))
    if vote is not None:
        response += f"\n\\boxed{{{vote}}}"
    return response, answers, vote


def cut_after_boxed(text: str) -> str:
    """``text`` up to the end of its first balanced ``\\boxed{...}`` (a sampled solution may run on past it)."""
    i = text.find("\\boxed{")
    if i < 0:
        return text.strip()
    depth, j = 0, i + len("\\boxed")
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[: j + 1].strip()
        j += 1
    return text.strip()

"""Building parallel_r1 traces from finished paths (shared by the ``scripted`` and ``self`` teachers).

The trace is kept short and regular for a ~1M-parameter student (CALIBRATION.md, "Cold-start SFT"): each path
ends with its own ``\\boxed{N}``, so its result sits at a fixed place; the summary states the paths' majority
answer; the final ``\\boxed{V}`` follows the block.

The summary is the weak link at tiny scale, and its default wording (``vote``: "Most give V.") is chosen for the
structured layout. There every path of a block starts at the same position and the summary sees all of them
alike, so nothing tells it which path came first: "Paths give 8, 9, 8" in path order (``listed``) is a target
the student cannot know, and it learns a blur of orders, then votes over its own misread list. The majority
answer is the same whatever the order, and attention over the paths' answers finds it directly.
"""

from __future__ import annotations

from collections import Counter

from parathink.formats.tags import TAGS
from parathink.grading import extract_answer

_OPEN, _CLOSE, _PATH, _END_PATH, _SUMMARY, _END_SUMMARY = TAGS["parallel_r1"]


def majority(answers: list[str | None], ties: str = "first") -> str | None:
    """The most common answer. A tie for the top goes to the one seen first (``ties="first"``, the NPR-style
    self-consistency vote), or to nobody (``ties="none"``)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    top = [a for a in counts if counts[a] == best]  # Counter keeps first-seen order
    return top[0] if len(top) == 1 or ties == "first" else None


# Summary style -> how a tie for the most common answer is settled (``majority``'s ``ties``).
SUMMARIES = {"vote": "none", "listed": "first"}


def vote_summary(answers: list[str | None], vote: str | None, style: str) -> str:
    """``vote``: "Most give V." (order-free); ``listed``: "Paths give A, B, C." in path order, then the vote.

    The order-free style also leaves a tie without a vote (``SUMMARIES``): breaking it by path order would be a
    target the student cannot see under the structured layout (and learns as a blend of the tied answers' digits).
    With no vote the trace has no final answer, and the filter rejects it.
    """
    if vote is not None:
        verdict = f"Most give {vote}."
    else:
        verdict = "No majority." if any(a is not None for a in answers) else "No answer."
    if style == "vote":
        return verdict
    shown = ", ".join(a if a is not None else "?" for a in answers)
    return f"Paths give {shown}.\n{verdict}"


def parallel_block(paths: list[str], summary: str) -> str:
    body = "\n".join(f"{_PATH}\n{p.strip()}\n{_END_PATH}" for p in paths)
    return f"{_OPEN}\n{body}\n{_CLOSE}\n{_SUMMARY}\n{summary.strip()}\n{_END_SUMMARY}"


def voted_trace(paths: list[str], prefix: str = "", summary: str = "vote") -> tuple[str, list[str | None], str | None]:
    """(response, each path's answer, the vote): prefix, one block over ``paths``, then ``\\boxed{vote}``."""
    if summary not in SUMMARIES:
        raise ValueError(f"summary style must be one of {', '.join(SUMMARIES)}, got {summary!r}")
    answers = [extract_answer(p) for p in paths]
    vote = majority(answers, ties=SUMMARIES[summary])
    block = parallel_block(paths, vote_summary(answers, vote, summary))
    response = (prefix.rstrip() + "\n" if prefix.strip() else "") + block
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

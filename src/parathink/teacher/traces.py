"""Building parallel traces from finished paths, in each grammar (the ``scripted`` and ``self`` teachers, SFT's
replays).

The trace is kept short and regular for a ~1M-parameter student (docs/calibration.md, "Cold-start SFT"): each path
ends with its own ``\\boxed{N}``, so its result sits at a fixed place; the summary states the paths' majority
answer; the final ``\\boxed{V}`` follows the block. One block, in the grammar asked for:

- parallel_r1: ``<Parallel>`` ``<Path>…</Path>``… ``</Parallel>`` ``<Summary>…</Summary>``;
- npr: ``<guideline>`` one ``<plan>i: solve</plan>`` per path ``</guideline>``, ``<step>i: …</step>``…,
  ``<takeaway>…</takeaway>``. Every self-distilled path follows the one strategy the tiny base knows, so a plan
  names no strategy; how many plans a block has is what the student learns to choose;
- parathinker: ``<think1>…</think1>`` … ``<thinkN>…</thinkN>`` ``<summary>…</summary>``.

The summary is the weak link at tiny scale, and its default wording (``vote``: "Most give V.") is chosen for the
structured layout. There every path of a block starts at the same position and the summary sees all of them
alike, so nothing tells it which path came first: "Paths give 8, 9, 8" in path order (``listed``) is a target
the student cannot know, and it learns a blur of orders, then votes over its own misread list. The majority
answer is the same whatever the order, and attention over the paths' answers finds it directly.

Where the block opens (``fork_at_agreement``): a worked solution is one line per operation, and the lines every
path shares carry no choice to vote on, so they are written once, sequentially, before the block; the block
opens at the first line where the paths differ. That is the step where forking pays, and it is where Parallel-R1's
relative position (the block's offset in the response) gets its meaning.
"""

from __future__ import annotations

from collections import Counter

from parathink.formats.grammar import closing, get_grammar
from parathink.grading import extract_answer

NPR_PLAN = "solve"  # the text of every NPR plan (see the module docstring)
# Lines each path keeps for itself when the block opens late: its last operation and its \boxed{} answer.
OWN_LINES = 2


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


def path_tags(grammar: str, i: int) -> tuple[str, str]:
    """The text that opens and closes path ``i`` (from 1) of a block in ``grammar``."""
    g = get_grammar(grammar)
    return f"{g.path_open_tag(i)}{g.label(i)}\n", f"\n{g.path_close_tag(i)}"


def block_head(grammar: str, k: int) -> str:
    """What precedes the first path of a ``k``-path block (NPR: the guideline with one plan per path)."""
    g = get_grammar(grammar)
    if g.forks_at_start:
        return ""  # ParaThinker: the first thought opens the block
    if not g.has_plans:
        return f"{g.fork_after}\n"
    # each plan carries its path's label ("i:"), which the parser matches against the step's
    plans = "\n".join(f"{g.plan}{g.label(i)} {NPR_PLAN}{closing(g.plan)}" for i in range(1, k + 1))
    return f"{g.plans_open}\n{plans}\n{g.fork_after}\n"


def summary_tag(grammar: str) -> str:
    """The tag that opens a block's summary."""
    return get_grammar(grammar).summary_open


def block_tail(grammar: str, summary: str) -> str:
    """What follows the last path: the block's closer and its summary."""
    g = get_grammar(grammar)
    close = f"{g.block_close}\n" if g.block_close else ""
    return f"{close}{g.summary_open}\n{summary.strip()}\n{g.summary_close}"


def parallel_block(paths: list[str], summary: str, grammar: str = "parallel_r1") -> str:
    body = "\n".join(o + p.strip() + c for i, p in enumerate(paths, 1) for o, c in [path_tags(grammar, i)])
    return f"{block_head(grammar, len(paths))}{body}\n{block_tail(grammar, summary)}"


def shared_lines(paths: list[str], own: int = OWN_LINES) -> int:
    """How many leading lines every path has in common, leaving each path at least ``own`` lines of its own."""
    lines = [p.strip().splitlines() for p in paths]
    limit = max(0, min(len(x) for x in lines) - own)
    n = 0
    while n < limit and all(x[n] == lines[0][n] for x in lines):
        n += 1
    return n


def fork_at_agreement(paths: list[str]) -> tuple[str, list[str]]:
    """(prefix, paths): the lines all paths share, written once, and what remains of each path after them."""
    n = shared_lines(paths)
    lines = [p.strip().splitlines() for p in paths]
    return "\n".join(lines[0][:n]), ["\n".join(x[n:]) for x in lines]


def voted_trace(paths: list[str], prefix: str = "", summary: str = "vote",
                grammar: str = "parallel_r1") -> tuple[str, list[str | None], str | None]:
    """(response, each path's answer, the vote): prefix, one block over ``paths``, then ``\\boxed{vote}``."""
    if summary not in SUMMARIES:
        raise ValueError(f"summary style must be one of {', '.join(SUMMARIES)}, got {summary!r}")
    answers = [extract_answer(p) for p in paths]
    vote = majority(answers, ties=SUMMARIES[summary])
    block = parallel_block(paths, vote_summary(answers, vote, summary), grammar)
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

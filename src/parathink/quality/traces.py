"""The trace filter: which raw teacher traces become cold-start SFT data (Parallel-R1 Sec. 3.1).

A trace is accepted when it is parallel (valid format with at least one block, docs/design.md), its final answer is
correct, its length is within bounds, and it is the first such trace of its problem. A record whose teacher
says it reached no vote (``vote: null``, the ``self`` teacher on a tie) is rejected too: its last ``\\boxed{}`` is
a path's answer, not a summary's. Everything else is
rejected with every reason that applies, so the report's reasons histogram is the paper's Table 1 for our data
(how often the teacher fails the format, the answer, or both); a response outside the length bounds is not graded.

Bad input never stops the filter: a line that is not UTF-8, not JSON, not an object, lacks a field, has an answer
that is not a string or a number, or holds a lone surrogate is counted and listed (file, line, why) in the report.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from parathink import jsonl
from parathink.config.filter import FilterConfig
from parathink.jsonl import BadLine, lone_surrogate
from parathink.scoring import score_completion

REQUIRED = ("problem", "answer", "response")
MAX_LISTED_BAD_LINES = 1000  # the report lists this many; the count is always exact


def read_raw(path: str | Path) -> Iterator[tuple[int, dict] | BadLine]:
    """Each line of a raw JSONL file: ``(line number, record)`` or a ``BadLine`` saying why it is unusable."""
    for item in jsonl.scan(path):
        if isinstance(item, BadLine):
            yield item
            continue
        lineno, rec = item
        missing = [k for k in REQUIRED if k not in rec or rec[k] is None]
        why = f"missing field(s) {', '.join(missing)}" if missing else unusable(rec)
        yield BadLine(str(path), lineno, why) if why else item


def unusable(rec: dict) -> str | None:
    """Why a record with the required fields still cannot be judged, or None."""
    if not isinstance(rec["response"], str) or not isinstance(rec["problem"], str):
        return "problem and response must be strings"
    answer = rec["answer"]
    if not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
        return f"answer must be a string or a number, got {type(answer).__name__}"  # its text would be graded
    field = lone_surrogate(rec)
    if field:
        return f"{field} holds a lone surrogate (valid JSON, not encodable as UTF-8)"
    return None


@dataclass
class Judged:
    """One record's verdict and the figures the gates and the report need."""

    record: dict
    valid: bool
    parallel: bool
    correct: bool
    extracted: str | None
    length: int
    num_blocks: int
    empty_paths: int
    reasons: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.reasons


def judge(rec: dict, cfg: FilterConfig) -> Judged:
    """Format, answer and length checks of one record (duplicates are decided by ``filter_records``).

    A response outside the length bounds is parsed (linear, and the format rates count every record) but never
    graded: it is rejected for its length, and a pathological one costs no math-verify call."""
    response = rec["response"]
    n = len(response)
    scored = score_completion(response, cfg.grammar, rec["answer"], grade_answer=cfg.min_chars <= n <= cfg.max_chars)
    trace, extracted = scored.trace, scored.extracted
    reasons = [f"format:{code}" for code in trace.errors]
    if trace.valid and not trace.blocks:
        reasons.append("no_block")
    if n < cfg.min_chars:
        reasons.append("too_short")
    elif n > cfg.max_chars:
        reasons.append("too_long")
    else:
        if extracted is None:
            reasons.append("no_answer")
        elif not scored.correct:
            reasons.append("incorrect")
        if "vote" in rec and rec["vote"] is None and extracted is not None:
            reasons.append("no_vote")
    return Judged(rec, trace.valid, trace.parallel, scored.correct, extracted, n, scored.blocks, scored.empty_paths,
                  reasons)


@dataclass
class FilterResult:
    judged: list[Judged]
    bad_lines: list[BadLine]
    lines: int

    @property
    def accepted(self) -> list[Judged]:
        return [j for j in self.judged if j.accepted]

    @property
    def rejected(self) -> list[Judged]:
        return [j for j in self.judged if not j.accepted]


def filter_records(items: Iterable[tuple[int, dict] | BadLine], cfg: FilterConfig) -> FilterResult:
    judged, bad, lines = [], [], 0
    kept_problems: set[str] = set()
    for item in items:
        lines += 1
        if isinstance(item, BadLine):
            bad.append(item)
            continue
        _, rec = item
        j = judge(rec, cfg)
        if cfg.one_per_problem and j.accepted:
            key = " ".join(rec["problem"].split())
            if key in kept_problems:
                j.reasons.append("duplicate_problem")  # the first accepted trace of a problem is kept
            else:
                kept_problems.add(key)
        judged.append(j)
    return FilterResult(judged, bad, lines)


def _rates(group: list[Judged]) -> dict[str, float]:
    n = len(group)
    counts = {"records": n, "valid": sum(j.valid for j in group), "parallel": sum(j.parallel for j in group),
              "correct": sum(j.correct for j in group), "accepted": sum(j.accepted for j in group)}
    rates = {f"{k}_rate": (counts[k] / n if n else 0.0) for k in ("valid", "parallel", "correct", "accepted")}
    return {**counts, **rates}


def build_report(result: FilterResult, cfg: FilterConfig, input_path: str) -> dict:
    """Counts and rates overall, per source and per level; reasons histogram; bad lines (file, line, why)."""
    by_source: dict[str, list[Judged]] = defaultdict(list)
    by_level: dict[str, list[Judged]] = defaultdict(list)
    for j in result.judged:
        by_source[str(j.record.get("source", "unknown"))].append(j)
        if j.record.get("level") is not None:
            by_level[str(j.record["level"])].append(j)
    reasons = Counter(r for j in result.judged for r in j.reasons)
    return {
        "input": input_path,
        "format": cfg.grammar,
        "bounds": {"min_chars": cfg.min_chars, "max_chars": cfg.max_chars, "one_per_problem": cfg.one_per_problem},
        "lines": result.lines,
        "bad_lines": len(result.bad_lines),
        "overall": _rates(result.judged),
        "per_source": {k: _rates(v) for k, v in sorted(by_source.items())},
        "per_level": {k: _rates(v) for k, v in sorted(by_level.items())},
        "reasons": dict(reasons.most_common()),
        "bad_line_list": [vars(b) for b in result.bad_lines[:MAX_LISTED_BAD_LINES]],
    }


def accepted_record(j: Judged) -> dict:
    return {**j.record, "num_blocks": j.num_blocks, "length": j.length}


def rejected_record(j: Judged) -> dict:
    return {**j.record, "reasons": j.reasons}

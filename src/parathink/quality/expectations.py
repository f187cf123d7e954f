"""Expectations and gate verdicts: the common shape of every stage's quality gate (docs/gates.md).

A gate is a short list of ``Expectation``s about what one stage produced: an observed figure, an operator, a
threshold, and whether it held. The runner records the verdict in the stage's ``_manifest.json`` under ``gates``,
in its MLflow run and in the log, so a stage's verdict reads the same whichever gate produced it (a
great-expectations suite, a model probe, a training log). Pure Python: nothing heavy is imported here.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

OPS = (">=", "<=", "==", "n/a")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Expectation:
    """One check. ``passed`` is None when it does not apply to this run (``note`` says why)."""

    name: str
    observed: Any
    op: str
    threshold: Any
    passed: bool | None
    note: str = ""

    def describe(self) -> str:
        """``parallel_rate 0.014 < 0.5``: the failed form of the check, for one-line messages."""
        negation = {">=": "<", "<=": ">", "==": "!="}.get(self.op, self.op)
        shown = negation if self.passed is False else self.op
        text = f"{self.name} {_show(self.observed)} {shown} {_show(self.threshold)}"
        return f"{text} ({self.note})" if self.note and self.passed is False else text


def at_least(name: str, observed: Any, threshold: float, note: str = "") -> Expectation:
    """observed >= threshold; a missing or non-finite observation fails (NaN must never pass a gate)."""
    return Expectation(name, observed, ">=", threshold, _finite(observed) and observed >= threshold, note)


def at_most(name: str, observed: Any, threshold: float, note: str = "") -> Expectation:
    return Expectation(name, observed, "<=", threshold, _finite(observed) and observed <= threshold, note)


def equals(name: str, observed: Any, expected: Any, note: str = "") -> Expectation:
    return Expectation(name, observed, "==", expected, observed == expected, note)


def not_applicable(name: str, note: str) -> Expectation:
    return Expectation(name, None, "n/a", None, None, note)


@dataclass
class Verdict:
    """A stage's gate result, as the manifest records it under ``gates``."""

    stage: str
    enabled: bool
    config: dict
    expectations: list[Expectation] = field(default_factory=list)
    data_docs: str | None = None  # great-expectations HTML, relative to the stage's output folder
    evaluated_at: float = field(default_factory=time.time)
    error: str | None = None  # the gate itself could not be evaluated (no verdict: re-evaluated on the next run)

    @property
    def passed(self) -> bool | None:
        if not self.enabled:
            return None
        if self.error is not None:
            return False
        return all(e.passed is not False for e in self.expectations)

    def failures(self) -> list[Expectation]:
        return [e for e in self.expectations if e.passed is False]

    def to_record(self) -> dict:
        return {"stage": self.stage, "enabled": self.enabled, "passed": self.passed, "config": self.config,
                "expectations": [_jsonable(asdict(e)) for e in self.expectations], "data_docs": self.data_docs,
                "evaluated_at": self.evaluated_at, "error": self.error}

    @classmethod
    def from_record(cls, record: dict) -> Verdict:
        expectations = [Expectation(**{k: e.get(k) for k in Expectation.__dataclass_fields__})
                        for e in record.get("expectations", [])]
        return cls(stage=str(record.get("stage", "")), enabled=bool(record.get("enabled", True)),
                   config=dict(record.get("config") or {}), expectations=expectations,
                   data_docs=record.get("data_docs"), evaluated_at=float(record.get("evaluated_at") or 0.0),
                   error=record.get("error"))


def _jsonable(row: dict) -> dict:
    """NaN and infinities become strings: the manifest is strict JSON, and "nan" must stay visible."""
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def table_rows(verdict: Verdict) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for e in verdict.expectations:
        mark = {True: "pass", False: "FAIL", None: "n/a"}[e.passed]
        rows.append((e.name, _show(e.observed), f"{e.op} {_show(e.threshold)}" if e.op != "n/a" else "-", mark,
                     e.note))
    return rows


def text_table(verdict: Verdict) -> list[str]:
    """The verdict as aligned text lines, for the log (the Airflow / KFP task log shows them)."""
    header = ("expectation", "observed", "threshold", "result", "note")
    rows = [header, *table_rows(verdict)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return [("  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + f"  {r[4]}").rstrip() for r in rows]


def markdown_table(verdict: Verdict) -> str:
    state = {True: "passed", False: "FAILED", None: "disabled"}[verdict.passed]
    lines = [f"# {verdict.stage} gate: {state}", ""]
    if verdict.error:
        lines += [f"The gate could not be evaluated: {verdict.error}", ""]
    lines += ["| expectation | observed | threshold | result | note |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table_rows(verdict)]
    if verdict.data_docs:
        lines += ["", f"Data docs: {verdict.data_docs}"]
    return "\n".join(lines) + "\n"


def summary_line(verdict: Verdict) -> str:
    """One line naming every failed expectation, for the exit-3 message."""
    if verdict.error:
        return f"{verdict.stage}: the gate could not be evaluated ({verdict.error})"
    failed = verdict.failures()
    return f"{verdict.stage}: {len(failed)} of {len(verdict.expectations)} expectations failed: " + \
        "; ".join(e.describe() for e in failed)

"""The data gates: the teacher's raw traces and the filter's accepted traces (great-expectations, with data docs).

- ``teacher``: a record with a response for at least ``min_record_share`` of the problems, and the raw suite
  (valid-format rate at least ``min_valid_rate``);
- ``filter``: the accepted-traces suite; plus the raw suite on its input when ``filter.input`` names traces from
  outside the run, which no teacher gate has checked.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from parathink.quality.expectations import Expectation, at_least
from parathink.quality.gate import GateInput, gate_section


def raw_rows(path: Path, grammar: str) -> list[dict]:
    """One row per usable line of a raw traces file (what the raw suite reads); unusable lines are left out."""
    from parathink.formats import parse
    from parathink.quality.traces import BadLine, read_raw

    rows = []
    for item in read_raw(path):
        if isinstance(item, BadLine):
            continue
        _, rec = item
        trace = parse(rec["response"], grammar)
        rows.append({"id": str(rec.get("id", "")), "source": str(rec.get("source", "")), "valid": int(trace.valid),
                     "parallel": int(trace.parallel), "length": len(rec["response"])})
    return rows


def _docs(out: GateInput, section: dict) -> Path | None:
    return out.gate_dir / "data_docs" if section["data_docs"] else None


def teacher_gate(cfg, out: GateInput) -> list[Expectation]:
    from parathink.quality import data_suites

    g = gate_section(cfg, "teacher")
    rows = raw_rows(out.folder / "raw.jsonl", str(cfg.teacher.grammar))
    problems = out.metrics.get("problems") or len(rows)
    answered = sum(1 for r in rows if r["length"] > 0)
    share = at_least("records_with_response_share", answered / problems if problems else 0.0,
                     g["min_record_share"], f"{answered} of {int(problems)} problems")
    gx = data_suites.gx_module()
    suite, _ = data_suites.validate({"raw_traces": (data_suites.raw_frame(rows),
                                                    data_suites.raw_checks(gx, g["min_valid_rate"]))}, _docs(out, g))
    return [share, *suite]


def _filter_input(cfg, scratch: Path) -> Path:
    src = str(cfg.filter.input)
    if not src.startswith("s3://"):
        return Path(src)
    from parathink import storage

    local = scratch / "input.jsonl"
    local.write_bytes(storage.read_bytes(src))
    return local


def filter_gate(cfg, out: GateInput) -> list[Expectation]:
    from parathink.config.filter import FilterStageConfig
    from parathink.quality import data_suites
    from parathink.quality.traces import BadLine, judge, read_raw

    g = gate_section(cfg, "filter")
    filter_cfg = FilterStageConfig.of(cfg).bounds()
    # The accepted traces judged again, independently of the verdicts the filter wrote next to them.
    items = list(read_raw(out.folder / "accepted.jsonl"))
    accepted = [judge(item[1], filter_cfg) for item in items if not isinstance(item, BadLine)]
    unreadable = Expectation("accepted.unreadable_lines", len(items) - len(accepted), "==", 0,
                             len(items) == len(accepted))
    gx = data_suites.gx_module()
    suites = {"accepted_traces": (data_suites.accepted_frame(accepted),
                                  data_suites.accepted_checks(gx, g["min_accepted"], filter_cfg))}
    with tempfile.TemporaryDirectory() as scratch:
        if cfg.filter.input is not None:  # traces from outside the run: no teacher gate has seen them
            rows = raw_rows(_filter_input(cfg, Path(scratch)), filter_cfg.grammar)
            suites = {"raw_traces": (data_suites.raw_frame(rows), data_suites.raw_checks(gx, g["min_valid_rate"])),
                      **suites}
        checks, _ = data_suites.validate(suites, _docs(out, g))
    return [*checks, unreadable]

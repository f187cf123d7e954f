"""The gate after ``teacher`` (great-expectations, with data docs): a record with a response for at least
``min_record_share`` of the problems, and the raw suite (valid-format rate at least ``min_valid_rate``)."""

from __future__ import annotations

from parathink.quality.data_gates import data_docs_dir, raw_rows
from parathink.quality.expectations import Expectation, at_least
from parathink.quality.gate import GateInput, gate_section


def teacher_gate(cfg, out: GateInput) -> list[Expectation]:
    from parathink.quality import data_suites

    g = gate_section(cfg, "teacher")
    rows = raw_rows(out.folder / "raw.jsonl", str(cfg.teacher.grammar))
    problems = out.metrics.get("problems") or len(rows)
    answered = sum(1 for r in rows if r["length"] > 0)
    share = at_least("records_with_response_share", answered / problems if problems else 0.0,
                     g["min_record_share"], f"{answered} of {int(problems)} problems")
    gx = data_suites.gx_module()
    suites = {"raw_traces": (data_suites.raw_frame(rows), data_suites.raw_checks(gx, g["min_valid_rate"]))}
    suite, _ = data_suites.validate(suites, data_docs_dir(out, g))
    return [share, *suite]

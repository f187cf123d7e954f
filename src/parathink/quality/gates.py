"""great-expectations suites, written as code, run as the gate between `filter` and `sft`.

Two suites, each validated by one checkpoint run that also renders GE's data docs (HTML) into the output folder:

- ``raw_traces`` (the teacher's output): there are records, and the valid-format rate is at least
  ``min_valid_rate`` (Parallel-R1 reports 83.7% on GSM8K with its teacher; a set far below that is broken);
- ``accepted_traces`` (what SFT will read): at least ``min_accepted`` rows, no duplicate problem, gold and
  extracted answers present, no empty path, lengths within bounds. The filter already enforces these; the
  suite checks them independently, so a filter bug or a permissive config cannot pass bad data downstream.

A failed expectation raises ``parathink.quality.GateFailed`` listing each failure with its observed value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parathink.quality import GateFailed
from parathink.quality.traces import FilterConfig, FilterResult, Judged


@dataclass(frozen=True)
class GateConfig:
    min_valid_rate: float = 0.5
    min_accepted: int = 1
    data_docs: bool = True


RAW_COLUMNS = ("id", "source", "valid", "parallel", "correct", "length")
ACCEPTED_COLUMNS = ("id", "problem_key", "answer", "extracted", "empty_paths", "length")


def _frames(result: FilterResult):
    import pandas as pd

    def raw_row(j: Judged) -> dict:
        return {"id": str(j.record.get("id", "")), "source": str(j.record.get("source", "")), "valid": int(j.valid),
                "parallel": int(j.parallel), "correct": int(j.correct), "length": j.length}

    def accepted_row(j: Judged) -> dict:
        answer = str(j.record["answer"]).strip()
        return {"id": str(j.record.get("id", "")), "problem_key": " ".join(j.record["problem"].split()),
                "answer": answer or None, "extracted": j.extracted, "empty_paths": j.empty_paths, "length": j.length}

    raw = pd.DataFrame([raw_row(j) for j in result.judged], columns=list(RAW_COLUMNS))
    accepted = pd.DataFrame([accepted_row(j) for j in result.accepted], columns=list(ACCEPTED_COLUMNS))
    return raw, accepted


def _suites(gx, gate: GateConfig, bounds: FilterConfig) -> dict[str, list]:
    E = gx.expectations
    return {
        "raw_traces": [
            E.ExpectTableRowCountToBeBetween(min_value=1),
            E.ExpectColumnMeanToBeBetween(column="valid", min_value=gate.min_valid_rate, max_value=1.0),
        ],
        "accepted_traces": [
            E.ExpectTableRowCountToBeBetween(min_value=gate.min_accepted),
            E.ExpectColumnValuesToBeUnique(column="problem_key"),
            E.ExpectColumnValuesToNotBeNull(column="answer"),
            E.ExpectColumnValuesToNotBeNull(column="extracted"),
            E.ExpectColumnValuesToBeBetween(column="empty_paths", min_value=0, max_value=0),
            E.ExpectColumnValuesToBeBetween(column="length", min_value=bounds.min_chars, max_value=bounds.max_chars),
        ],
    }


def _context(gx, docs_dir: Path | None):
    context = gx.get_context(mode="ephemeral")
    try:  # no progress bars in logs (CI); the attribute moved between GE releases, so best effort
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:  # noqa: BLE001
        pass
    if docs_dir is not None:
        context.add_data_docs_site(site_name="parathink", site_config={
            "class_name": "SiteBuilder",
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(Path(docs_dir).resolve())},
        })
    return context


def _observed(result: dict) -> Any:
    if "observed_value" in result:
        v = result["observed_value"]
        return float(v) if hasattr(v, "__float__") and not isinstance(v, (int, bool)) else v
    if "unexpected_count" in result:
        return {"unexpected_count": result["unexpected_count"],
                "examples": list(result.get("partial_unexpected_list", []))[:5]}
    return result


def run_gates(result: FilterResult, gate: GateConfig, bounds: FilterConfig, docs_dir: Path | None) -> dict:
    """Validate both suites; returns ``{"success", "expectations": [...], "data_docs"}`` (never raises on failure)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no usage statistics sent from a data gate
    import great_expectations as gx

    context = _context(gx, docs_dir)
    source = context.data_sources.add_pandas("parathink")
    frames = dict(zip(("raw_traces", "accepted_traces"), _frames(result)))
    validations = []
    for name, expectations in _suites(gx, gate, bounds).items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        for e in expectations:
            suite.add_expectation(e)
        validations.append((name, context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=f"{name}_gate"))))
    report: list[dict] = []
    for name, vd in validations:
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs")] if docs_dir is not None else []
        checkpoint = context.checkpoints.add(gx.Checkpoint(name=f"{name}_checkpoint", validation_definitions=[vd],
                                                           actions=actions))
        run = checkpoint.run(batch_parameters={"dataframe": frames[name]})
        for vr in run.run_results.values():
            for r in vr.results:
                cfg = r.expectation_config
                kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
                report.append({"suite": name, "expectation": cfg.type, "kwargs": kwargs, "success": bool(r.success),
                               "observed": _observed(dict(r.result))})
    docs = str(docs_dir / "index.html") if docs_dir is not None and (docs_dir / "index.html").exists() else None
    return {"success": all(e["success"] for e in report), "expectations": report, "data_docs": docs}


def describe_failures(gate_report: dict) -> list[str]:
    lines = []
    for e in gate_report["expectations"]:
        if not e["success"]:
            args = ", ".join(f"{k}={v}" for k, v in e["kwargs"].items())
            lines.append(f"{e['suite']}: {e['expectation']}({args}) observed {e['observed']}")
    return lines


def raise_if_failed(gate_report: dict, report_dir: str) -> None:
    if gate_report["success"]:
        return
    failures = describe_failures(gate_report)
    docs = gate_report.get("data_docs") or "(data docs off)"
    raise GateFailed(f"{len(failures)} expectation(s) failed: " + "; ".join(failures)
                     + f". Report: {report_dir}/report.json, data docs: {docs}",
                     failures=[e for e in gate_report["expectations"] if not e["success"]], report_dir=report_dir)

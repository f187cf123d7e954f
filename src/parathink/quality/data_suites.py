"""great-expectations suites for the data gates, written as code, with GE's data docs (HTML) rendered per run.

- ``raw_traces`` (the teacher's gate; the filter's too when it reads traces from outside the run): there are
  records, and their valid-format rate is at least ``min_valid_rate`` (Parallel-R1 reports 83.7% on GSM8K with its
  teacher; a set far below that is broken);
- ``accepted_traces`` (the filter's gate, what SFT will read): at least ``min_accepted`` rows, no duplicate problem,
  gold and extracted answers present, no empty path, lengths within bounds. The filter already enforces these; the
  suite checks them independently, so a filter bug or a permissive config cannot pass bad data downstream.

``validate`` runs the suites through one GE checkpoint each and returns every result as an ``Expectation``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parathink.quality.expectations import Expectation
from parathink.quality.traces import FilterConfig, Judged

RAW_COLUMNS = ("id", "source", "valid", "parallel", "length")
ACCEPTED_COLUMNS = ("id", "problem_key", "answer", "extracted", "empty_paths", "length")


@dataclass(frozen=True)
class Check:
    """A GE expectation with the name, operator and threshold the gate's table shows for it. Row-wise checks
    observe their count of offending rows (``== 0``); aggregate ones observe GE's ``observed_value``."""

    name: str
    expectation: Any
    op: str
    threshold: Any
    note: str = ""


def raw_frame(rows: Iterable[dict]):
    """Rows of ``RAW_COLUMNS``: one per raw trace, its format verdict (``data_gates.raw_rows``)."""
    import pandas as pd

    return pd.DataFrame(list(rows), columns=list(RAW_COLUMNS))


def accepted_frame(judged: Iterable[Judged]):
    import pandas as pd

    rows = [{"id": str(j.record.get("id", "")), "problem_key": " ".join(j.record["problem"].split()),
             "answer": str(j.record["answer"]).strip() or None, "extracted": j.extracted,
             "empty_paths": j.empty_paths, "length": j.length} for j in judged]
    return pd.DataFrame(rows, columns=list(ACCEPTED_COLUMNS))


def raw_checks(gx, min_valid_rate: float) -> list[Check]:
    E = gx.expectations
    return [
        Check("raw.records", E.ExpectTableRowCountToBeBetween(min_value=1), ">=", 1),
        Check("raw.valid_rate", E.ExpectColumnMeanToBeBetween(column="valid", min_value=min_valid_rate,
                                                             max_value=1.0), ">=", min_valid_rate),
    ]


def accepted_checks(gx, min_accepted: int, bounds: FilterConfig) -> list[Check]:
    E = gx.expectations
    return [
        Check("accepted.records", E.ExpectTableRowCountToBeBetween(min_value=min_accepted), ">=", min_accepted),
        Check("accepted.duplicate_problems", E.ExpectColumnValuesToBeUnique(column="problem_key"), "==", 0),
        Check("accepted.missing_answer", E.ExpectColumnValuesToNotBeNull(column="answer"), "==", 0),
        Check("accepted.missing_extracted", E.ExpectColumnValuesToNotBeNull(column="extracted"), "==", 0),
        Check("accepted.empty_paths", E.ExpectColumnValuesToBeBetween(column="empty_paths", min_value=0,
                                                                     max_value=0), "==", 0),
        Check("accepted.length_out_of_bounds", E.ExpectColumnValuesToBeBetween(
            column="length", min_value=bounds.min_chars, max_value=bounds.max_chars), "==", 0,
            f"chars in [{bounds.min_chars}, {bounds.max_chars}]"),
    ]


def _context(gx, docs_dir: Path | None):
    context = gx.get_context(mode="ephemeral")
    try:  # no progress bars in logs (CI); the attribute moved between GE releases, so best effort
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:
        pass
    if docs_dir is not None:
        context.add_data_docs_site(site_name="parathink", site_config={
            "class_name": "SiteBuilder",
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(Path(docs_dir).resolve())},
        })
    return context


def _as_expectation(check: Check, success: bool, result: dict) -> Expectation:
    if "observed_value" in result:
        value = result["observed_value"]
        observed = float(value) if hasattr(value, "__float__") and not isinstance(value, (int, bool)) else value
        return Expectation(check.name, observed, check.op, check.threshold, success, check.note)
    examples = list(result.get("partial_unexpected_list") or [])[:5]
    note = check.note + (f"; e.g. {examples}" if examples and not success else "")
    return Expectation(check.name, int(result.get("unexpected_count", 0)), check.op, check.threshold, success,
                       note.strip("; "))


def gx_module():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no usage statistics sent from a data gate
    import great_expectations as gx

    return gx


def validate(suites: dict[str, tuple[Any, list[Check]]], docs_dir: Path | None) -> tuple[list[Expectation], str | None]:
    """Run each suite (name -> (DataFrame, checks)) through its own checkpoint; return every check's result in
    the order given, and the data docs' index page (None when ``docs_dir`` is None)."""
    gx = gx_module()
    context = _context(gx, docs_dir)
    source = context.data_sources.add_pandas("parathink")
    out: list[Expectation] = []
    for name, (frame, checks) in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        by_id = {}
        for check in checks:
            added = suite.add_expectation(check.expectation)
            by_id[added.id] = check
        definition = context.validation_definitions.add(gx.ValidationDefinition(data=batch, suite=suite,
                                                                                name=f"{name}_gate"))
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs")] if docs_dir is not None else []
        checkpoint = context.checkpoints.add(gx.Checkpoint(name=f"{name}_checkpoint",
                                                           validation_definitions=[definition], actions=actions))
        run = checkpoint.run(batch_parameters={"dataframe": frame})
        results = {r.expectation_config.id: r for vr in run.run_results.values() for r in vr.results}
        out += [_as_expectation(check, bool(results[i].success), dict(results[i].result)) for i, check in by_id.items()]
    docs = docs_dir / "index.html" if docs_dir is not None else None
    return out, str(docs) if docs is not None and docs.exists() else None

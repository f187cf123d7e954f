"""The `filter` stage: cold-start data selection (Parallel-R1 Sec. 3.1).

Reads raw traces (``filter.input``, default the teacher stage's ``raw.jsonl``), writes ``accepted.jsonl``
(parallel AND correct, within length bounds, one per problem), ``rejected.jsonl`` (each with its ``reasons``)
and ``report.json`` (rates per source and level, reasons histogram, bad input lines with file, line and why). The
report names its input as the run names it (``teacher/raw.jsonl``, or ``filter.input`` as configured), never by the
folder it was read from, and its time goes to ``_timings.json``: the same traces give the same output hash in any
run directory (``parathink.rundir.timings``).
Its gate (``gate``, run by the runner on the finished output: ``stages/filter/gate.py``) is the
great-expectations suite of the accepted traces, with data docs in ``_gates/``; a failed gate exits with code 3.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from omegaconf import DictConfig

from parathink import jsonl
from parathink.config.filter import FilterStageConfig
from parathink.config.thresholds import FilterThresholds
from parathink.rundir import provenance, timings
from parathink.stages.context import StageContext
from parathink.stages.contract import Gate, StageSpec
from parathink.stages.filter.gate import filter_gate

# Short override names of `parathink stage filter input=RAW.jsonl output=DIR gate.min_valid_rate=R` (issue 3):
# the runner rewrites them with ``expand_overrides`` before composing the config.
OVERRIDE_ALIASES = {"input": "filter.input", "output": "filter.output", "gate": "filter.gate",
                    "length": "filter.length", "one_per_problem": "filter.one_per_problem"}


def expand_overrides(overrides: list[str]) -> list[str]:
    """``input=X`` -> ``filter.input=X``, ``gate.min_valid_rate=R`` -> ``filter.gate.min_valid_rate=R``."""
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        head, dot, rest = key.partition(".")
        if sep and head in OVERRIDE_ALIASES:
            key = OVERRIDE_ALIASES[head] + (dot + rest)
        out.append(key + sep + value)
    return out


def validate(cfg: DictConfig) -> None:
    FilterStageConfig.of(cfg)


def _write_jsonl(path: Path, records) -> int:
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(jsonl.dumps(r) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _input_path(f: FilterStageConfig, ctx: StageContext) -> tuple[Path, str]:
    """(the local file to read, its name in the report: the same whichever folder the run went to)."""
    src = f.input
    if src is None:
        return ctx.input("teacher") / "raw.jsonl", "teacher/raw.jsonl"
    provenance.note_read(str(src))  # an input from outside the run directory: its edit makes this stage stale
    if str(src).startswith("s3://"):
        from parathink import storage

        local = ctx.work_dir / "input.jsonl"
        local.write_bytes(storage.read_bytes(str(src)))
        return local, str(src)
    return Path(str(src)), str(src)


def filter_file(raw: Path, out: Path, cfg: DictConfig, name: str | None = None) -> dict:
    """Filter ``raw`` into ``out``; returns the report, where ``raw`` is called ``name`` (default: its path)."""
    from parathink.quality.traces import accepted_record, build_report, filter_records, read_raw, rejected_record

    filter_cfg = FilterStageConfig.of(cfg).bounds()
    out.mkdir(parents=True, exist_ok=True)
    name = str(raw) if name is None else name
    started = time.time()
    result = filter_records(read_raw(raw), filter_cfg)
    report = build_report(result, filter_cfg, name)
    for bad in report["bad_line_list"]:
        bad["file"] = name if bad["file"] == str(raw) else bad["file"]
    timings.write(out, filter_seconds=time.time() - started)
    _write_jsonl(out / "accepted.jsonl", (accepted_record(j) for j in result.accepted))
    _write_jsonl(out / "rejected.jsonl", (rejected_record(j) for j in result.rejected))
    _write_json(out / "report.json", report)
    return report


def run(cfg: DictConfig, ctx: StageContext) -> dict[str, float]:
    f = FilterStageConfig.of(cfg)
    raw, name = _input_path(f, ctx)
    out = Path(f.output) if f.output is not None else ctx.out_dir
    report = filter_file(raw, out, cfg, name)
    if out.resolve() != Path(ctx.out_dir).resolve():  # keep the run directory's copy complete too
        shutil.copytree(out, ctx.out_dir, dirs_exist_ok=True)
    o = report["overall"]
    metrics = {"records": float(o["records"]), "bad_lines": float(report["bad_lines"]),
               "valid_rate": o["valid_rate"], "parallel_rate": o["parallel_rate"], "correct_rate": o["correct_rate"],
               "accepted": float(o["accepted"]), "accepted_rate": o["accepted_rate"]}
    ctx.tracker.log_metrics(metrics)
    if (out / "report.json").exists():
        ctx.tracker.log_artifact(out / "report.json")
    return metrics


STAGE = StageSpec(run=run, validate=validate, gate=Gate(filter_gate, FilterThresholds), shared_keys=("format", "seed"),
                  expand_overrides=expand_overrides)

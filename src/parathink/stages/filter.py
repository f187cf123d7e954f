"""The `filter` stage: cold-start data selection and its data-quality gate (Parallel-R1 Sec. 3.1).

Reads raw traces (``filter.input``, default the teacher stage's ``raw.jsonl``), writes ``accepted.jsonl``
(parallel AND correct, within length bounds, one per problem), ``rejected.jsonl`` (each with its ``reasons``)
and ``report.json`` (rates per source and level, reasons histogram, bad input lines with file, line and why),
then runs the great-expectations gate (``parathink.quality.gates``): on failure every output, ``gate.json`` and
the data docs stay in the output folder and ``GateFailed`` stops the run (exit code 3).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from omegaconf import DictConfig

from parathink import jsonl, provenance
from parathink.stages.context import ConfigError, StageContext

SHARED_KEYS = ("format", "seed")
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


def _bounds(cfg: DictConfig):
    from parathink.quality.traces import FilterConfig

    f = cfg.filter
    return FilterConfig(grammar=str(f.format), min_chars=int(f.length.min_chars), max_chars=int(f.length.max_chars),
                        one_per_problem=bool(f.one_per_problem))


def validate(cfg: DictConfig) -> None:
    from parathink.formats.tags import GRAMMARS

    f = cfg.filter
    if f.format not in GRAMMARS:
        raise ConfigError(f"filter.format: {f.format!r} is not one of {', '.join(GRAMMARS)}")
    if not 0.0 <= float(f.gate.min_valid_rate) <= 1.0:
        raise ConfigError(f"filter.gate.min_valid_rate: must be in [0, 1], got {f.gate.min_valid_rate}")
    if int(f.length.min_chars) > int(f.length.max_chars):
        raise ConfigError(f"filter.length: min_chars {f.length.min_chars} > max_chars {f.length.max_chars}")
    if f.input is not None and not str(f.input).startswith("s3://") and not Path(str(f.input)).is_file():
        raise ConfigError(f"filter.input: {f.input} is not a file")


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


def _input_path(cfg: DictConfig, ctx: StageContext) -> Path:
    src = cfg.filter.input
    if src is None:
        return ctx.input("teacher") / "raw.jsonl"
    provenance.note_read(str(src))  # an input from outside the run directory: its edit makes this stage stale
    if str(src).startswith("s3://"):
        from parathink import storage

        local = ctx.work_dir / "input.jsonl"
        local.write_bytes(storage.read_bytes(str(src)))
        return local
    return Path(str(src))


def filter_file(raw: Path, out: Path, cfg: DictConfig) -> tuple[dict, dict | None]:
    """Filter ``raw`` into ``out``; returns (report, gate report or None). Does not raise on a failed gate."""
    from parathink.quality.traces import accepted_record, build_report, filter_records, read_raw, rejected_record

    bounds = _bounds(cfg)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    result = filter_records(read_raw(raw), bounds)
    report = build_report(result, bounds, str(raw))
    report["filter_seconds"] = time.time() - started
    _write_jsonl(out / "accepted.jsonl", (accepted_record(j) for j in result.accepted))
    _write_jsonl(out / "rejected.jsonl", (rejected_record(j) for j in result.rejected))
    gate_report = None
    g = cfg.filter.gate
    if g.enabled:
        from parathink.quality.gates import GateConfig, run_gates

        docs = out / "data_docs" if g.data_docs else None
        gate_report = run_gates(result, GateConfig(float(g.min_valid_rate), int(g.min_accepted), bool(g.data_docs)),
                                bounds, docs)
        _write_json(out / "gate.json", gate_report)
        report["gate"] = {"success": gate_report["success"], "data_docs": gate_report["data_docs"]}
    _write_json(out / "report.json", report)
    return report, gate_report


def run(cfg: DictConfig, ctx: StageContext) -> dict[str, float]:
    raw = _input_path(cfg, ctx)
    out = Path(str(cfg.filter.output)) if cfg.filter.output is not None else ctx.out_dir
    report, gate_report = filter_file(raw, out, cfg)
    if out.resolve() != Path(ctx.out_dir).resolve():  # keep the run directory's copy complete too
        shutil.copytree(out, ctx.out_dir, dirs_exist_ok=True)
    o = report["overall"]
    metrics = {"records": float(o["records"]), "bad_lines": float(report["bad_lines"]),
               "valid_rate": o["valid_rate"], "parallel_rate": o["parallel_rate"], "correct_rate": o["correct_rate"],
               "accepted": float(o["accepted"]), "accepted_rate": o["accepted_rate"],
               "gate_passed": float(gate_report["success"]) if gate_report else 1.0}
    ctx.tracker.log_metrics(metrics)
    if (out / "report.json").exists():
        ctx.tracker.log_artifact(out / "report.json")
    if gate_report is not None and not gate_report["success"]:
        from parathink.quality.gates import describe_failures, raise_if_failed

        for line in describe_failures(gate_report):
            print(f"[filter] gate failed: {line}", flush=True)
        raise_if_failed(gate_report, str(out))
    return metrics

"""The runner's side of the quality gates (docs/gates.md): evaluate, record, show, stop.

A stage opts in with the ``gate`` of its ``StageSpec`` (``parathink.stages.contract.Gate``). The
runner evaluates it on the stage's finished output before publishing, so the verdict is published with the output,
atomically: ``<stage>/_gates/report.json`` and ``report.md`` (and great-expectations data docs for the data gates)
next to the outputs, and ``gates`` in ``_manifest.json``. A failed gate still publishes (the outputs are there to
be inspected) and then stops the run with exit 3; a stage whose output did not pass is never consumed.

Thresholds (``<stage>.gate``) are not part of the stage's config hash: changing one re-evaluates the gate on the
published output instead of recomputing the stage. A published output whose gate failed with the same thresholds
is not evaluated again (exit 3 at once); ``force=[stage]`` recomputes it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from parathink.config.thresholds import check_thresholds
from parathink.logs import log
from parathink.quality import GateFailed
from parathink.quality.expectations import Verdict, markdown_table, summary_line, text_table
from parathink.quality.gate import GateInput, gate_section
from parathink.rundir.confine import inside
from parathink.rundir.manifest import GATES, Manifest
from parathink.stages.contract import StageSpec

REPORT_JSON, REPORT_MD = "report.json", "report.md"


def validate(cfg, name: str, stage: StageSpec) -> None:
    """Before any stage starts: the thresholds of a stage that has a gate (``Gate.thresholds``, their schema)."""
    if stage.gate:
        check_thresholds(cfg, name, stage.gate.thresholds)


def needs_evaluation(cfg, name: str, stage: StageSpec, manifest: Manifest) -> bool:
    """A published output whose verdict is missing (published before gates, or the gate could not run) or was
    reached with other thresholds."""
    if not stage.gate:
        return False
    record = manifest.gates
    return not record or bool(record.get("error")) or record.get("config") != gate_section(cfg, name)


def evaluate(cfg, name: str, stage: StageSpec, folder: Path, gate_dir: Path, manifest: Manifest, rundir
             ) -> tuple[dict | None, Exception | None]:
    """Run the stage's gate on ``folder``; write its report into ``gate_dir``; (the manifest's ``gates`` record, the
    error that kept the gate from reaching a verdict). None for a stage without a gate."""
    if not stage.gate:
        return None, None
    section = gate_section(cfg, name)
    verdict, error = Verdict(stage=name, enabled=bool(section.get("enabled", True)), config=section), None
    if not verdict.enabled:
        log(f"warning: {name}: quality gate disabled ({name}.gate.enabled=false); nothing checks what it produced")
    else:
        # The gate's report folder and the probe's figure cache are written in place: neither may be a symlink out
        # of the run directory (rundir.confine).
        cache_dir = inside(rundir.local, rundir.local / ".gates")
        inside(rundir.local, gate_dir)
        gate_dir.mkdir(parents=True, exist_ok=True)
        out = GateInput(stage=name, folder=folder, gate_dir=gate_dir, metrics=dict(manifest.metrics),
                        output_hash=manifest.output_hash, seed=int(cfg.seed), cache_dir=cache_dir,
                        input_hash=rundir.output_hash, resolve_input=rundir.resolve_input)
        started = time.time()
        try:
            verdict.expectations = list(stage.gate.check(cfg, out))
        except Exception as err:  # published anyway with no verdict: the next run evaluates the gate again
            verdict.error, error = f"{type(err).__name__}: {' '.join(str(err).split())}"[:500], err
        verdict.evaluated_at = time.time()
        if (gate_dir / "data_docs" / "index.html").exists():
            verdict.data_docs = f"{GATES}/data_docs/index.html"
        log(f"{name}: gate evaluated in {verdict.evaluated_at - started:.1f} s")
    _write(gate_dir, verdict)
    _show(verdict)
    return verdict.to_record(), error


def _write(gate_dir: Path, verdict: Verdict) -> None:
    gate_dir.mkdir(parents=True, exist_ok=True)
    (gate_dir / REPORT_JSON).write_text(json.dumps(verdict.to_record(), indent=1), encoding="utf-8")
    (gate_dir / REPORT_MD).write_text(markdown_table(verdict), encoding="utf-8")


def _show(verdict: Verdict) -> None:
    """The table on stderr: what the Airflow and Kubeflow task logs show."""
    if not verdict.enabled:
        return
    state = "passed" if verdict.passed else "FAILED"
    log(f"{verdict.stage} gate: {state}" + (f" ({verdict.error})" if verdict.error else ""))
    for line in text_table(verdict):
        log(f"  {line}")


def recheck(cfg, name: str, stage: StageSpec, rundir, manifest: Manifest, tracking) -> None:
    """Evaluate the gate of an up-to-date published output again (new thresholds, or no verdict yet) and publish
    the new verdict beside it; the outputs and their hash are left as they are."""
    why = "its gate settings changed" if manifest.gates and not manifest.gates.get("error") else "no verdict yet"
    log(f"{name}: evaluating its gate on the published output ({why})")
    gate_dir = rundir.fresh_tmp(f"{name}.{GATES}")
    try:
        record, error = evaluate(cfg, name, stage, rundir.resolve_input(name), gate_dir, manifest, rundir)
        manifest.gates = record
        rundir.publish_gates(name, gate_dir, manifest)
        tracking.gate_rechecked(name, manifest, gate_dir)
    finally:
        shutil.rmtree(gate_dir, ignore_errors=True)
    if error is not None:
        raise error


def raise_if_failed(name: str, record: dict | None, stage_uri: str) -> None:
    """Exit 3 (``GateFailed``) when the recorded verdict did not pass; one line naming each failed expectation."""
    if not record or record.get("passed") is not False:
        return
    verdict = Verdict.from_record(record)
    docs = f", data docs: {stage_uri}/{verdict.data_docs}" if verdict.data_docs else ""
    raise GateFailed(f"{summary_line(verdict)}. Report: {stage_uri}/{GATES}/{REPORT_JSON}{docs}; outputs kept in "
                     f"{stage_uri} for inspection, nothing downstream runs",
                     failures=[e.__dict__ for e in verdict.failures()], report_dir=f"{stage_uri}/{GATES}")

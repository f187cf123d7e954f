"""A run's report card: ``<run_dir>/report.md``, generated from what the run published (``run.json``, each stage's
manifest and gate verdict, eval's ``results.json``, the RL stages' ``metrics.jsonl``), never from hand-copied figures.

It holds the stage times and peaks, the gate verdicts, the results table with the paired differences against each
stage's start, and the paper's Figure 3 (accuracy, parallel rate and relative position against RL step) as a PNG
beside it (``report/figure3_rl_curves.png``). The runner writes it after every run and logs it to the run's MLflow
parent run; ``parathink report RUN_DIR`` writes it again for any run directory, local or ``s3://``.

``render`` is pure (dicts in, markdown out) so it is tested without a run; ``write`` does the reading and writing.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from parathink.evaluation import results as results_file
from parathink.evaluation.table import format_table, format_vs_start
from parathink.storage import uri as storage

REPORT_MD = "report.md"
FIGURE_DIR = "report"
# Manifest metrics worth a column: training length, the RL curve's ends, memory.
RL_ENDS = (("accuracy_first", "acc first"), ("accuracy_last", "acc last"), ("parallel_rate_last", "parallel last"),
           ("relative_position_last", "rel.pos last"), ("probe_accuracy_start", "probe start"),
           ("probe_accuracy_end", "probe end"))


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _num(value, digits: int = 3) -> str:
    if value is None or value != value:  # NaN: e.g. no parallel rollout, so no relative position
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}f}"
    return f"{int(value)}"


def _gate_cell(manifest: dict | None) -> str:
    gates = (manifest or {}).get("gates") or {}
    if not gates or not gates.get("enabled", True):
        return "off"
    if gates.get("passed") is None:
        return "not evaluated"
    failed = [e["name"] for e in gates.get("expectations", []) if not e.get("passed")]
    return "passed" if gates.get("passed") else "FAILED: " + ", ".join(failed or ["see _gates/report.md"])


def stage_rows(stages: list[str], run: dict, manifests: dict[str, dict | None]) -> list[list[str]]:
    """One row per stage: how it ended in this run, its time, steps, peak memory and gate."""
    rows = []
    for name in stages:
        entry = run.get("stages", {}).get(name, {})
        manifest = manifests.get(name)
        metrics = (manifest or {}).get("metrics", {})
        seconds = (manifest or {}).get("duration_s", entry.get("duration_s"))
        status = entry.get("status") or ("published" if manifest else "not run")
        rows.append([name, status, "-" if seconds is None else f"{seconds:.0f}", _num(metrics.get("steps")),
                     _num(metrics.get("peak_rss_mb"), 0), _gate_cell(manifest),
                     (manifest or {}).get("output_hash", "-")])
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def rl_rows(stages: list[str], manifests: dict[str, dict | None]) -> list[list[str]]:
    rows = []
    for name in stages:
        metrics = (manifests.get(name) or {}).get("metrics", {})
        if "reward_first" in metrics or "accuracy_first" in metrics:
            rows.append([name] + [_num(metrics.get(key)) for key, _ in RL_ENDS])
    return rows


def render(experiment: str, run_dir: str, stages: list[str], run: dict, manifests: dict[str, dict | None],
           results: dict | None, figures: list[str]) -> str:
    """The report's markdown. ``figures``: paths relative to the report, shown in order."""
    finished = [m.get("finished_at") for m in manifests.values() if m and m.get("finished_at")]
    total = sum((m or {}).get("duration_s") or 0 for m in manifests.values())
    out = [f"# parathink run: {experiment}", "",
           f"Run directory `{run_dir}`; started {_when(run.get('created'))}, last stage finished "
           f"{_when(max(finished) if finished else None)}; the stages' own time adds up to {total / 60:.1f} min.", ""]
    parent = (run.get("mlflow") or {}).get("parent_run_id")
    if parent:
        out += [f"MLflow: parent run `{parent}` in `{run['mlflow'].get('uri', '?')}`.", ""]
    out += ["## Stages", "", markdown_table(["stage", "this run", "seconds", "steps", "peak MiB", "gate", "output"],
                                            stage_rows(stages, run, manifests)), ""]
    failed = [s for s in stages if ((manifests.get(s) or {}).get("gates") or {}).get("passed") is False]
    if failed:
        out += ["Gate reports: " + ", ".join(f"`{s}/_gates/report.md`" for s in failed), ""]
    rl = rl_rows(stages, manifests)
    if rl:
        out += ["## RL stages: first and last step", "", markdown_table(["stage"] + [t for _, t in RL_ENDS], rl), ""]
    out += ["## Results", ""]
    if results:
        settings = results.get("settings", {})
        out += [f"Format `{settings.get('format', '?')}`; accuracy, pass@k and parallel rate in percent, relative "
                "position in [0, 1].", "", "```", format_table(results), "```", ""]
        deltas = format_vs_start(results)
        if deltas:
            out += ["```", deltas, "```", "A difference under two standard errors is not a finding.", ""]
        if results.get("missing"):
            out += [f"Not evaluated: {', '.join(map(str, results['missing']))}.", ""]
    else:
        out += ["No evaluation in this run (the `eval` stage has not published).", ""]
    if figures:
        out += ["## Figure 3: accuracy, parallel rate and relative position against RL step", ""]
        out += [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(out)


def write(rundir, experiment: str, stages: list[str]) -> str:
    """Writes ``report.md`` (and its figure) into the run directory; returns the report's location."""
    from parathink.rundir.confine import inside
    from parathink.tracking.plots import PLOT_DIR, write_run_plots

    manifests = {name: (asdict(m) if (m := rundir.manifest(name)) is not None else None) for name in stages}
    results = None
    if manifests.get("eval") is not None:
        location = storage.join(rundir.stage_uri("eval"), results_file.FILE)
        results = results_file.parse(storage.read_bytes(location), location) if storage.exists(location) else None
    # Every plot, drawn once per report: the run's tracking logs these same files (tracking.curriculum).
    # The plot folder is removed and rewritten, and a local run's report and figure are written in place: none may
    # be a symlink that leads out of the run directory (rundir.confine; checked before anything is removed).
    plot_dir = inside(rundir.local, rundir.local / PLOT_DIR)
    if not rundir.remote:
        for rel in (REPORT_MD, FIGURE_DIR):
            inside(rundir.local, rundir.local / rel)
    shutil.rmtree(plot_dir, ignore_errors=True)
    figures = []
    for png in write_run_plots(rundir, plot_dir, tuple(stages)):
        if png.name.startswith("figure3"):  # the results table is in the markdown already
            rel = f"{FIGURE_DIR}/{png.name}"
            storage.write_bytes(storage.join(rundir.root, rel), png.read_bytes())
            figures.append(rel)
    text = render(experiment, str(rundir.root), stages, rundir.read_run(), manifests, results, figures)
    location = storage.join(rundir.root, REPORT_MD)
    storage.write_text(location, text)
    if rundir.remote:  # a local copy beside the run's scratch, for the MLflow artifact
        (rundir.local / REPORT_MD).write_text(text)
    return location



def published_stages(rundir) -> list[str]:
    """The stages run.json names or that have published, in the order they started."""
    from parathink.stages import CURRICULUM

    listed = set(rundir.read_run().get("stages", {}))
    manifests = {s: rundir.manifest(s) for s in listed | set(CURRICULUM)}
    started = {s: m.started_at for s, m in manifests.items() if m is not None}
    names = listed | set(started)
    return sorted(names, key=lambda s: (started.get(s, float("inf")),
                                        CURRICULUM.index(s) if s in CURRICULUM else len(CURRICULUM)))


def main(argv: list[str]) -> int:
    """``parathink report RUN_DIR``: (re)write the run's report.md from what it published; print where."""
    import argparse

    from parathink.errors import BadInput, ParathinkError
    from parathink.rundir.folder import RunDir

    p = argparse.ArgumentParser(prog="parathink report", description=main.__doc__)
    p.add_argument("run_dir", help="a run directory, local or s3://")
    args = p.parse_args(argv)
    try:
        if not storage.is_s3(args.run_dir) and not Path(args.run_dir).is_dir():
            raise BadInput(f"run_dir: {args.run_dir} is not a folder")
        rundir = RunDir(args.run_dir)
        stages = published_stages(rundir)
        if not stages:
            raise BadInput(f"run_dir: {args.run_dir} has no published stage and no run.json")
        location = write(rundir, str(rundir.read_run().get("experiment", "?")), stages)
    except ParathinkError as err:
        print(f"parathink report: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 2)
    print(location)
    return 0

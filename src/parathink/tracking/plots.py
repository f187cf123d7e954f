"""PNG plots of a run: the paper's Figure 3 (accuracy, parallel rate, relative position against RL step)
and the final results table. Read from the RL stages' ``metrics.jsonl`` and eval's ``results.json``."""

from __future__ import annotations

import json
from pathlib import Path

from parathink.evaluation import results as results_file

# Under a run directory's local side: the plots of its last report (parathink.report draws them, tracking logs them).
PLOT_DIR = Path(".tracking") / "plots"
FIGURE3 = (("accuracy", "accuracy"), ("parallel_rate", "parallel rate"), ("relative_position", "relative position"))


def find_value(record: dict, name: str) -> float | None:
    """``record[name]``, or a key ending in ``/name`` or ``.name`` (loops may prefix, e.g. ``train/accuracy``)."""
    if isinstance(record.get(name), (int, float)):
        return float(record[name])
    for key, value in record.items():
        if isinstance(value, (int, float)) and (key.endswith("/" + name) or key.endswith("." + name)):
            return float(value)
    return None


def read_curves(metrics_jsonl: Path) -> dict[str, tuple[list[int], list[float]]]:
    """{metric: (steps, values)} for the Figure-3 metrics found in one stage's metrics.jsonl."""
    curves: dict[str, tuple[list[int], list[float]]] = {m: ([], []) for m, _ in FIGURE3}
    for i, line in enumerate(metrics_jsonl.read_text().splitlines()):
        if not line.strip():
            continue
        record = json.loads(line)
        step = int(record.get("step", i + 1))
        for metric, _ in FIGURE3:
            value = find_value(record, metric)
            if value is not None:
                curves[metric][0].append(step)
                curves[metric][1].append(value)
    return curves


def figure3(curves_by_stage: dict[str, dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(FIGURE3), figsize=(4.2 * len(FIGURE3), 3.4))
    for ax, (metric, title) in zip(axes, FIGURE3):
        for stage, curves in curves_by_stage.items():
            steps, values = curves.get(metric, ([], []))
            if steps:
                ax.plot(steps, values, label=stage, linewidth=1.2)
        ax.set_title(title)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table_png(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from parathink.evaluation.table import table_rows

    header, rows = table_rows(results)
    fig, ax = plt.subplots(figsize=(1.2 * len(header) + 1, 0.4 * len(rows) + 1))
    ax.axis("off")
    tbl = ax.table(cellText=rows, colLabels=header, loc="center")
    tbl.auto_set_font_size(False)
    tbl.set_fontsize(8)
    tbl.scale(1, 1.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_run_plots(rundir, out_dir: Path, stages: tuple[str, ...]) -> list[Path]:
    """Every plot the run's published outputs allow; returns the PNG paths written.

    Figure 3 gets a line per stage among ``stages`` whose ``metrics.jsonl`` has any of its metrics.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    curves = {}
    for stage in stages:
        if stage == "eval" or rundir.manifest(stage) is None:
            continue
        path = rundir.resolve_input(stage) / "metrics.jsonl"
        if path.exists():
            found = read_curves(path)
            if any(steps for steps, _ in found.values()):
                curves[stage] = found
    if curves:
        written.append(figure3(curves, out_dir / "figure3_rl_curves.png"))
    if rundir.manifest("eval") is not None:
        folder = rundir.resolve_input("eval")
        if (folder / results_file.FILE).exists():
            written.append(table_png(results_file.read(folder), out_dir / "results_table.png"))
    return written

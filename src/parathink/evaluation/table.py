"""The results tables: the paper's Table 2 at toy scale (rows are stages, columns the headline metrics), ParaThinker's
accuracy against the number of paths (rows ``<set>@N``), NPR's plans per block, and several runs stacked."""

from __future__ import annotations

from parathink.formats.grammar import GRAMMAR_REGISTRY

STAGE_ORDER = ("base", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")
# (results key, column header, scale to percent)
COLUMNS = (("accuracy", "mean@k", True), ("pass_at_k", "pass@k", True),
           ("parallel_rate", "parallel", True), ("relative_position", "rel.pos", False))


def ordered_stages(results: dict) -> list[str]:
    stages = list(results.get("stages", {}))
    return [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER)


# ParaThinker-1.5B's average accuracy (docs/reference.md): sequential, then 2 / 4 / 8 paths.
PARATHINKER_1P5B = {"sequential": 50.9, 2: 54.9, 4: 59.9, 8: 63.2}


def set_names(results: dict) -> list[str]:
    """The test sets, in order; the rows at a number of paths (``easy@4``) are ``path_rows``' business."""
    seen: list[str] = []
    for sets in results.get("stages", {}).values():
        seen.extend(s for s in sets if s not in seen and "@" not in s)
    return seen


def path_rows(results: dict) -> dict[str, dict[str, dict[int, dict]]]:
    """{stage: {set: {paths: row}}} of the rows scored at a number of paths (``<set>@N``)."""
    out: dict = {}
    for stage, sets in results.get("stages", {}).items():
        for name, row in sets.items():
            base, at, n = name.partition("@")
            if at and n.isdigit():
                out.setdefault(stage, {}).setdefault(base, {})[int(n)] = row
    return out


def cell(row: dict | None, key: str, percent: bool) -> str:
    value = (row or {}).get(key)
    if value is None:
        return "-"
    return f"{100 * value:.1f}" if percent else f"{value:.3f}"


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) with one column group per test set."""
    sets = set_names(results)
    header = ["stage"] + [f"{s} {title}" for s in sets for _, title, _ in COLUMNS]
    rows = []
    for stage in ordered_stages(results):
        by_set = results["stages"][stage]
        rows.append([stage] + [cell(by_set.get(s), key, pct) for s in sets for key, _, pct in COLUMNS])
    return header, rows


def render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def format_table(results: dict) -> str:
    """Text table; accuracy / pass@k / parallel rate in percent, relative position in [0, 1]. Followed by the
    path-count table and the plans per block when the run has them."""
    header, rows = table_rows(results)
    ns = sorted({f"{s}: n={row.get('n')}, k={row.get('k')}" for sets in results.get("stages", {}).values()
                 for s, row in sets.items() if "@" not in s})
    text = render(header, rows) + ("\n(" + "; ".join(ns) + ")" if ns else "")
    extra = [t for t in (format_path_counts(results), format_paths_hist(results)) if t]
    return "\n\n".join([text, *extra])


def _seconds(row: dict | None) -> str:
    value = (row or {}).get("seconds_per_sample")
    return "-" if value is None else f"{1000 * value:.1f}"


def format_path_counts(results: dict, sequential: str = "base") -> str:
    """ParaThinker's table: mean@k and wall-clock milliseconds per sample against the number of paths, the
    ``sequential`` stage's row first, and ParaThinker-1.5B's average beside it."""
    by_stage = path_rows(results)
    if not by_stage:
        return ""
    out = []
    for stage, sets in by_stage.items():
        names = list(sets)
        header = ["paths"] + [f"{s} {c}" for s in names for c in ("mean@k", "ms/sample")] + ["paper 1.5B avg"]
        seq = results["stages"].get(sequential, {})
        rows = [[f"{sequential} (sequential)"] + [v for s in names for v in (cell(seq.get(s), "accuracy", True),
                                                                            _seconds(seq.get(s)))]
                + [f"{PARATHINKER_1P5B['sequential']:.1f}"]] if seq else []
        for n in sorted({n for by_n in sets.values() for n in by_n}):
            rows.append([f"{stage} @{n}"] + [v for s in names for v in (cell(sets[s].get(n), "accuracy", True),
                                                                         _seconds(sets[s].get(n)))]
                        + [f"{PARATHINKER_1P5B[n]:.1f}" if n in PARATHINKER_1P5B else "-"])
        out.append(render(header, rows))
    return "accuracy and time against the number of paths (ms/sample: sampling wall time / samples):\n" + \
        "\n\n".join(out)


def format_paths_hist(results: dict) -> str:
    """NPR's plans per block, per stage and set: the share of blocks with each number of plans (the model's choice)."""
    grammar = GRAMMAR_REGISTRY.get(results.get("settings", {}).get("format"))
    if grammar is None or not grammar.has_plans:  # only blocks that declare their paths (NPR's plans) have plans
        return ""
    lines = []
    for stage in ordered_stages(results):
        for name, row in results["stages"][stage].items():
            hist = row.get("paths_hist") or {}
            if hist and "@" not in name:
                shares = "  ".join(f"{n}: {100 * v:.1f}%" for n, v in sorted(hist.items(), key=lambda x: int(x[0])))
                lines.append(f"{stage:<14} {name:<6} {shares}")
    return "\n".join(["plans per block (share of blocks of parallel samples):", *lines]) if lines else ""


def format_vs_start(results: dict) -> str:
    """One line per stage: mean@k minus its start's on the same problems, +- the paired standard error."""
    lines = []
    for stage in ordered_stages(results):
        sets = results.get("vs_start", {}).get(stage)
        if not sets:
            continue
        start = next(iter(sets.values()))["start"]
        parts = [f"{s} {100 * v['delta']:+.1f} ± {100 * v['se']:.1f}" for s, v in sets.items() if "@" not in s]
        parts += [f"{s} (vs {v.get('start_set', s)}) {100 * v['delta']:+.1f} ± {100 * v['se']:.1f}"
                  for s, v in sets.items() if "@" in s]
        lines.append(f"{stage:<14} vs {start:<8} " + "   ".join(parts))
    if not lines:
        return ""
    return "\n".join(["mean@k against each stage's start (points, ± paired standard error over problems):", *lines])


def format_compare(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> str:
    """Two runs side by side: for every stage and set, each metric as ``A | B``."""
    sets = [s for s in set_names(a) + set_names(b)]
    sets = list(dict.fromkeys(sets))
    stages = list(dict.fromkeys(ordered_stages(a) + ordered_stages(b)))
    header = ["stage"] + [f"{s} {title} {name_a}|{name_b}" for s in sets for _, title, _ in COLUMNS]
    rows = []
    for stage in stages:
        ra, rb = a.get("stages", {}).get(stage, {}), b.get("stages", {}).get(stage, {})
        rows.append([stage] + [f"{cell(ra.get(s), k, p)} | {cell(rb.get(s), k, p)}"
                               for s in sets for k, _, p in COLUMNS])
    return render(header, rows)


def format_runs(runs: list[tuple[str, dict]]) -> str:
    """Several runs' tables stacked: one row per run and stage (NPR's and ParaThinker's rows beside
    Parallel-R1's), the columns of every test set any of them has."""
    sets = list(dict.fromkeys(s for _, r in runs for s in set_names(r)))
    header = ["run", "stage"] + [f"{s} {title}" for s in sets for _, title, _ in COLUMNS]
    rows = []
    for name, results in runs:
        fmt = results.get("settings", {}).get("format", "?")
        for stage in ordered_stages(results):
            by_set = results["stages"][stage]
            rows.append([f"{name} ({fmt})", stage] + [cell(by_set.get(s), k, p) for s in sets for k, _, p in COLUMNS])
    return render(header, rows)

"""The results table (the paper's Table 2 at toy scale): rows are stages, columns the headline metrics."""

from __future__ import annotations

STAGE_ORDER = ("base", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline")
# (results key, column header, scale to percent)
COLUMNS = (("accuracy", "mean@k", True), ("pass_at_k", "pass@k", True),
           ("parallel_rate", "parallel", True), ("relative_position", "rel.pos", False))


def ordered_stages(results: dict) -> list[str]:
    stages = list(results.get("stages", {}))
    return [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER)


def set_names(results: dict) -> list[str]:
    seen: list[str] = []
    for sets in results.get("stages", {}).values():
        seen.extend(s for s in sets if s not in seen)
    return seen


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
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def format_table(results: dict) -> str:
    """Text table; accuracy / pass@k / parallel rate in percent, relative position in [0, 1]."""
    header, rows = table_rows(results)
    ns = sorted({f"{s}: n={row.get('n')}, k={row.get('k')}" for sets in results.get("stages", {}).values()
                 for s, row in sets.items()})
    return render(header, rows) + ("\n(" + "; ".join(ns) + ")" if ns else "")


def format_vs_start(results: dict) -> str:
    """One line per stage: mean@k minus its start's on the same problems, +- the paired standard error."""
    lines = []
    for stage in ordered_stages(results):
        sets = results.get("vs_start", {}).get(stage)
        if not sets:
            continue
        start = next(iter(sets.values()))["start"]
        parts = [f"{s} {100 * v['delta']:+.1f} ± {100 * v['se']:.1f}" for s, v in sets.items()]
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

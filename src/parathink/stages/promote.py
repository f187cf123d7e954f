"""The ``promote`` stage: move the registry's ``champion`` alias to this run's best model when it wins.

docs/orchestration.md ("The call"): promotion is a stage like the others, the last task of the Airflow DAGs and of the
Kubeflow pipeline. It reads this run's ``eval/results.json``, picks the run's best registered model version on
``tracking.promote.metric``, compares it with the current ``champion`` and moves the alias only when the candidate
wins by more than ``tracking.promote.margin`` (``parathink.tracking.registry.decide``). The comparison table goes
to the log, to ``comparison.md`` / ``promotion.json`` in the stage's output and to its MLflow run.

It refuses (exit 2) when the run has no eval, when tracking is not MLflow (there is no registry), and (exit 3)
when any stage of the run recorded a failed gate: a run that did not pass its gates is never promoted.
"""

from __future__ import annotations

import json
import sys

from omegaconf import DictConfig

from parathink.errors import ConfigError
from parathink.evaluation import results as results_file
from parathink.stages.context import StageContext
from parathink.tracking.promote_config import PromoteConfig

# The registry and the run's MLflow parent are recorded by `tracking`; the eval stage's results are the input.
SHARED_KEYS = ("tracking", "experiment_name", "seed")
TABLE_KEYS = ("accuracy", "pass_at_k", "parallel_rate", "relative_position")


def validate(cfg: DictConfig) -> None:
    PromoteConfig.of(cfg)


def failed_gates(rundir, stages: list[str]) -> list[str]:
    """The stages of this run whose published manifest records a gate that did not pass."""
    failed = []
    from parathink import storage

    for name in stages:
        uri = storage.join(rundir.stage_uri(name), "_manifest.json")
        if not storage.exists(uri):
            continue
        try:
            recorded = json.loads(storage.read_bytes(uri))
        except (ValueError, UnicodeDecodeError):
            continue  # a damaged manifest is no published output (RunDir.manifest warns about it)
        gates = recorded.get("gates") if isinstance(recorded, dict) else None
        if isinstance(gates, dict) and gates.get("passed") is False:
            failed.append(name)
    return failed


def comparison_table(metric: str, candidate: dict, champion: dict | None, sets: list[str]) -> str:
    """Markdown: one row per eval set and key, candidate beside champion (values from the version tags)."""
    champ_name = f"champion v{champion['version']} ({champion['stage']})" if champion else "champion (none)"
    lines = [f"| metric | candidate v{candidate['version']} ({candidate['stage']}) | {champ_name} |", "|---|---|---|"]
    for tset in sets:
        for key in TABLE_KEYS:
            tag = f"eval.{tset}.{key}"
            cand = candidate["tags"].get(tag)
            champ = champion["tags"].get(tag) if champion else None
            if cand is None and champ is None:
                continue
            mark = " **(promotion metric)**" if f"{tset}.{key}" == metric else ""
            lines.append(f"| {tset}.{key}{mark} | {cand if cand is not None else '-'} | "
                         f"{champ if champ is not None else '-'} |")
    return "\n".join(lines)


def _describe(version) -> dict:
    return {"version": str(version.version), "stage": version.tags.get("stage", "?"), "tags": dict(version.tags)}


def run(cfg: DictConfig, ctx: StageContext) -> dict:
    from parathink.stages.rundir import RunDir
    from parathink.quality import GateFailed
    from parathink.tracking import reachable, registry

    rundir = RunDir(str(cfg.run_dir), cfg.get("cache_dir"))
    failed = failed_gates(rundir, [str(s) for s in cfg.stages if str(s) != ctx.name])
    if failed:  # before the eval is read: reading it would refuse too, naming only the first failed stage
        raise GateFailed(f"promote: not promoting a run whose gates failed at {', '.join(failed)}",
                         failures=[{"stage": s} for s in failed], report_dir=str(rundir.root))
    results = results_file.read(ctx.input("eval"))
    rule = PromoteConfig.of(cfg)
    metric, margin = rule.metric, float(rule.margin)
    parent = rundir.read_run().get("mlflow", {}).get("parent_run_id")
    if not parent:
        raise ConfigError(f"promote: {rundir.root}/run.json names no MLflow run (was the run tracked with MLflow?)")
    client = reachable.client(str(cfg.tracking.uri))
    name = registry.registered_name(cfg)
    candidate = best_version_of_run(client, name, parent, results, metric)
    if candidate is None:
        raise ConfigError(f"promote: no registered model of this run has a value for {metric} in its eval")
    champion = registry.version_or_none(client, name, registry.CHAMPION)
    before = _describe(champion) if champion is not None else None
    promoted, why = registry.promote(client, name, str(candidate.version), metric, margin,
                                     decided_by=getattr(ctx.tracker, "run_id", None))
    sets = sorted({k.split(".")[1] for k in candidate.tags if k.startswith("eval.")})
    table = comparison_table(metric, _describe(candidate), before, sets)
    print(f"{why}\n\n{table}", file=sys.stderr, flush=True)
    (ctx.out_dir / "comparison.md").write_text(f"{why}\n\n{table}\n", encoding="utf-8")
    decision = {"promoted": promoted, "why": why, "metric": metric, "margin": margin, "model": name,
                "candidate": _describe(candidate), "champion_before": before}
    (ctx.out_dir / "promotion.json").write_text(json.dumps(decision, indent=1, sort_keys=True), encoding="utf-8")
    ctx.tracker.log_artifact(ctx.out_dir / "comparison.md")
    value = registry.metric_value(results, candidate.tags.get("stage", ""), metric)
    return {"promoted": float(promoted), "candidate_version": float(candidate.version),
            **({"candidate_metric": value} if value is not None else {})}


def best_version_of_run(client, name: str, parent_run_id: str, results: dict, metric: str):
    """This run's registered version with the best ``metric`` in ``results`` (not the global ``candidate`` alias,
    which a concurrent run may have moved)."""
    from parathink.tracking import registry

    runs = client.search_runs([client.get_run(parent_run_id).info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
    stage_runs = {r.data.tags.get("parathink.stage"): r.info.run_id for r in runs if r.data.tags.get("parathink.stage")}
    best, best_value = None, float("-inf")
    for stage, version in registry.versions_of_run(client, name, stage_runs).items():
        value = registry.metric_value(results, stage, metric)
        if value is not None and value > best_value:
            best, best_value = version, value
    return best

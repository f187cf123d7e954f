"""The ``promote`` stage: move the registry's ``champion`` alias to this run's best model when it wins.

docs/orchestration.md ("The call"): promotion is a stage like the others, the last task of the Airflow DAGs and of the
Kubeflow pipeline. It reads this run's ``eval/results.json``, picks the run's best registered model version on
``tracking.promote.metric``, samples it beside the current ``champion`` on the same problems with the same seeds
(``parathink.tracking.challenge``; ``tracking.promote.paired=false`` compares the scores stored on the versions
instead) and moves the alias only when the paired gain clears ``tracking.promote.margin`` by
``tracking.promote.ses`` standard errors with no guard metric falling. A first model (no champion) is promoted with
that fact recorded. The comparison table goes to the log, to ``comparison.md`` / ``promotion.json`` (and the
per-problem records to ``paired/``) in the stage's output and to its MLflow run; the decision goes on the candidate's
model version as tags.

It refuses (exit 2) when the run has no eval, when tracking is not MLflow (there is no registry), and (exit 3)
when any stage of the run recorded a failed gate: a run that did not pass its gates is never promoted.
"""

from __future__ import annotations

import json
import sys

from omegaconf import DictConfig

from parathink.config.promote import PromoteConfig
from parathink.errors import ConfigError
from parathink.evaluation import results as results_file
from parathink.stages.context import StageContext
from parathink.stages.contract import StageSpec
from parathink.tracking import challenge

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
    """A version as promotion.json records it: its tags but the eval's times (``eval.<set>.seconds_per_sample``:
    measured, not scored, and kept out of hashed files; the registry still carries them)."""
    tags = {k: v for k, v in version.tags.items() if k.rpartition(".")[2] not in results_file.TIMED}
    return {"version": str(version.version), "stage": version.tags.get("stage", "?"), "tags": tags}


def run(cfg: DictConfig, ctx: StageContext) -> dict:
    from parathink.quality import GateFailed
    from parathink.rundir.folder import RunDir
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
    decided_by = getattr(ctx.tracker, "run_id", None)
    paired = None
    if champion is not None and str(champion.version) == str(candidate.version):
        promoted, why = False, f"{name} v{candidate.version} is already the champion"
    elif rule.paired and champion is not None:
        paired = _paired(cfg, ctx, rule, client, name, candidate, champion)
        ok, why_ = challenge.decide(paired, rule)
        promoted, why = registry.apply_decision(client, name, candidate, champion, ok, why_, metric=metric,
                                                margin=margin, record=challenge.tags(paired, decided_by))
        ctx.tracker.log_metrics(_paired_metrics(paired))
    elif rule.paired:  # the first model: nothing to sample beside it
        promoted, why = registry.apply_decision(
            client, name, candidate, None, True, "there is no champion yet", metric=metric, margin=margin,
            record={"promotion.comparison": "none", **({"promotion.decided_by_run": decided_by} if decided_by
                                                      else {})})
    else:
        promoted, why = registry.promote(client, name, str(candidate.version), metric, margin, decided_by=decided_by)
    sets = sorted({k.split(".")[1] for k in candidate.tags if k.startswith("eval.")})
    table = comparison_table(metric, _describe(candidate), before, sets)
    if paired is not None:
        table = f"{paired_table(paired)}\n\nAs each version's own eval scored it:\n\n{table}"
    print(f"{why}\n\n{table}", file=sys.stderr, flush=True)
    (ctx.out_dir / "comparison.md").write_text(f"{why}\n\n{table}\n", encoding="utf-8")
    decision = {"promoted": promoted, "why": why, "metric": metric, "margin": margin, "model": name,
                "candidate": _describe(candidate), "champion_before": before,
                "comparison": "paired" if paired is not None else ("stored" if before else "none"),
                **({"paired": paired} if paired is not None else {})}
    (ctx.out_dir / "promotion.json").write_text(json.dumps(decision, indent=1, sort_keys=True), encoding="utf-8")
    ctx.tracker.log_artifact(ctx.out_dir / "comparison.md")
    value = registry.metric_value(results, candidate.tags.get("stage", ""), metric)
    return {"promoted": float(promoted), "candidate_version": float(candidate.version),
            **({"candidate_metric": value} if value is not None else {})}


def _paired(cfg, ctx, rule, client, name: str, candidate, champion) -> dict:
    """The champion downloaded from the registry and the candidate from this run, sampled on the same problems
    with the same seeds (``parathink.tracking.challenge``)."""
    cand_stage, champ_stage = candidate.tags.get("stage", "?"), champion.tags.get("stage", "?")
    champ_dir = challenge.champion_dir(str(cfg.tracking.uri), name, str(champion.version),
                                       ctx.work_dir / "champion")
    return challenge.run_comparison(cfg, rule, candidate_dir=ctx.input(cand_stage) / "model",
                                    candidate_stage=cand_stage, champion_dir_=champ_dir, champion_stage=champ_stage,
                                    seed=int(ctx.seed), out_dir=ctx.out_dir / "paired")


def paired_table(paired: dict) -> str:
    """Markdown: each compared metric and guard, the candidate beside the champion, the paired delta and its SE."""
    lines = [f"Paired: the same {paired['problems']} problems per set, {paired['k']} samples each, the same seeds",
             "", "| metric | candidate | champion | delta | SE |", "|---|---|---|---|---|"]
    for kind, rows in (("", paired["metrics"]), ("guard ", paired["guards"])):
        for m, d in rows.items():
            if d is not None:
                lines.append(f"| {kind}{m} | {d['candidate']:.4f} | {d['champion']:.4f} | {d['delta']:+.4f} | "
                             f"{d['se']:.4f} |")
    return "\n".join(lines)


def _paired_metrics(paired: dict) -> dict[str, float]:
    return {f"paired.{m}.{k}": float(d[k]) for rows in (paired["metrics"], paired["guards"])
            for m, d in rows.items() if d is not None for k in ("delta", "se", "candidate", "champion")}


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


# The registry and the run's MLflow parent are recorded by `tracking`; the eval stage's results are the input.
# The paired re-evaluation samples with the eval stage's settings, on its sets, in the run's format.
STAGE = StageSpec(run=run, validate=validate, shared_keys=("tracking", "experiment_name", "seed", "eval", "format"))

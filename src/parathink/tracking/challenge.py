"""Champion/challenger: the champion and the candidate sampled on the same problems with the same seeds, and the
rule that promotes the candidate only when the paired gain clears the margin by enough standard errors.

Both models go through the eval stage's own machinery (``parathink.evaluation``: the engine's sampler, grading and
the set's row), with the run's ``eval`` settings (sampling, mode, paths per block) and the first
``tracking.promote.problems`` problems of each set the metrics name, ``tracking.promote.k`` samples each. Each set's
sampler gets the same seed for both models: two equal models draw equal samples, so their difference is exactly 0
(common random numbers), and what differs between two models is the models, not the draw.

The rule (``decide``): on every metric of ``[metric, *metrics]`` the paired gain minus ``margin`` must exceed
``ses`` standard errors of the paired difference; on every set compared, no key of ``guards`` (parallel rate,
format validity) may fall by more than its allowance.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from parathink.config.promote import PromoteConfig
from parathink.logs import log


def sample_model(cfg: DictConfig, model_dir: Path, stage: str, rule: PromoteConfig, seed: int,
                 out_dir: Path | None = None) -> dict[str, dict[str, dict]]:
    """{set: {problem id: row}} of the model in ``model_dir`` (evaluated as ``stage`` evaluates: its eval mode) on
    the comparison's problems; with ``out_dir``, each set's per-problem records go to ``<out_dir>/<set>.jsonl``."""
    import torch

    from parathink import distributed
    from parathink.config.eval import sampling_config, stage_mode
    from parathink.evaluation.evaluate import evaluate_set
    from parathink.evaluation.generators import engine_generator
    from parathink.evaluation.paired import per_problem
    from parathink.evaluation.sets import active_sets, problems_and_k
    from parathink.modeling import load_model

    e, grammar = cfg.eval, str(cfg.format)
    sets = active_sets(cfg)
    missing = [s for s in rule.sets if s not in sets]
    if missing:
        from parathink.errors import ConfigError

        raise ConfigError(f"tracking.promote: metric set(s) {missing} are not eval sets of this experiment "
                          f"(eval.sets: {sorted(sets)})")
    torch.manual_seed(seed)
    model, tok = load_model(model_dir, device=distributed.device())
    out: dict[str, dict[str, dict]] = {}
    for i, name in enumerate(rule.sets):
        records, _ = problems_and_k(name, OmegaConf.to_container(sets[name], resolve=True), seed)
        records = records[:rule.problems]
        generate, _backend = engine_generator(
            model, tok, grammar=grammar, mode=stage_mode(cfg, stage), num_paths=e.num_paths,
            # the same seed for both models: common random numbers
            sampling=sampling_config(e.sampling, batch_size=e.batch_size, seed=seed * 1000 + i))
        problems, _ = evaluate_set(records, generate, rule.k, grammar=grammar, tokenizer=tok,
                                   batch_problems=e.batch_problems)
        out[name] = per_problem(problems, rule.k, grammar)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{name}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems), encoding="utf-8")
    return out


def comparison(candidate: dict[str, dict[str, dict]], champion: dict[str, dict[str, dict]],
               rule: PromoteConfig) -> dict:
    """{"metrics": {<set>.<key>: paired figures}, "guards": {<set>.<key>: paired figures}} (``paired.compare``)."""
    from parathink.evaluation.paired import compare

    metrics = {}
    for m in rule.compared:
        tset, _, key = m.partition(".")
        metrics[m] = compare(candidate.get(tset, {}), champion.get(tset, {}), key)
    guards = {f"{tset}.{key}": compare(candidate.get(tset, {}), champion.get(tset, {}), key)
              for tset in rule.sets for key in rule.guards}
    return {"metrics": metrics, "guards": guards, "problems": rule.problems, "k": rule.k}


def decide(comp: dict, rule: PromoteConfig) -> tuple[bool, str]:
    """(promote?, why): every metric's paired gain exceeds the margin by ``rule.ses`` SEs, no guard falls too far."""
    reasons, ok = [], True
    for m, d in comp["metrics"].items():
        if d is None:
            return False, f"{m}: no paired values (were the problems scored?)"
        clears = d["delta"] - float(rule.margin) > rule.ses * d["se"]
        ok &= clears
        reasons.append(f"{m} {d['delta']:+.4f} ± {d['se']:.4f} (paired, {d['n_problems']} problems x {comp['k']}) "
                       f"{'clears' if clears else 'does not clear'} margin {float(rule.margin):g} + "
                       f"{rule.ses:g} SE")
    for g, d in comp["guards"].items():
        allowed = float(rule.guards[g.partition(".")[2]])
        if d is not None and d["delta"] < -allowed:
            ok = False
            reasons.append(f"guard {g} fell {d['delta']:+.4f} ± {d['se']:.4f} (allowed -{allowed:g})")
    return ok, "; ".join(reasons)


def tags(comp: dict, decided_by: str | None) -> dict[str, str]:
    """The comparison as model version tags: ``promotion.delta.<set>.<key>``, ``promotion.se.<set>.<key>``, the
    means of both, the guards' deltas, and its size."""
    out = {"promotion.comparison": "paired", "promotion.problems": str(comp["problems"]),
           "promotion.k": str(comp["k"])}
    for kind, rows in (("", comp["metrics"]), ("guard.", comp["guards"])):
        for m, d in rows.items():
            if d is None:
                continue
            out[f"promotion.{kind}delta.{m}"] = f"{d['delta']:.4f}"
            out[f"promotion.{kind}se.{m}"] = f"{d['se']:.4f}"
            if not kind:
                out[f"promotion.candidate.{m}"] = f"{d['candidate']:.4f}"
                out[f"promotion.champion.{m}"] = f"{d['champion']:.4f}"
    if decided_by:
        out["promotion.decided_by_run"] = decided_by
    return out


def champion_dir(tracking_uri: str, name: str, version: str, dst: Path) -> Path:
    """A registered version (a number, or an alias such as ``champion``) as one local checkpoint folder that
    ``load_model``, ``from_pretrained`` and ``vllm serve`` read: a version logged with the transformers flavor
    (``MLmodel`` beside ``model/`` and ``components/tokenizer/``) is put back together; one registered as raw files is
    used as downloaded."""
    import shutil

    import mlflow

    ref = f"models:/{name}/{version}" if str(version).isdigit() else f"models:/{name}@{version}"
    got = Path(mlflow.artifacts.download_artifacts(artifact_uri=ref,
                                                   dst_path=str(dst / "download"),
                                                   tracking_uri=tracking_uri))
    if (got / "config.json").exists():
        return got
    if (got / "MLmodel").exists() and (got / "model" / "config.json").exists():
        merged = dst / "model"
        shutil.copytree(got / "model", merged, dirs_exist_ok=True)
        tok = got / "components" / "tokenizer"
        if tok.is_dir():
            shutil.copytree(tok, merged, dirs_exist_ok=True)
        return merged
    raise FileNotFoundError(f"{name} v{version}: neither a checkpoint (config.json) nor a transformers-flavor model "
                            f"(MLmodel, model/config.json) in its artifacts ({sorted(p.name for p in got.iterdir())})")


def run_comparison(cfg: DictConfig, rule: PromoteConfig, *, candidate_dir: Path, candidate_stage: str,
                   champion_dir_: Path, champion_stage: str, seed: int, out_dir: Path) -> dict:
    """Sample both models (candidate first) and compare; per-problem records under ``out_dir/{candidate,champion}``."""
    log(f"promote: sampling the candidate ({candidate_stage}) and the champion ({champion_stage}) on "
        f"{rule.problems} problems x {rule.k} of {', '.join(rule.sets)}, seed {seed}")
    cand = sample_model(cfg, candidate_dir, candidate_stage, rule, seed, out_dir / "candidate")
    champ = sample_model(cfg, champion_dir_, champion_stage, rule, seed, out_dir / "champion")
    return comparison(cand, champ, rule)

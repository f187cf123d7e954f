"""The model registry: every model stage's checkpoint becomes a version of ``parathink-<experiment>``.

After ``eval`` each version carries its scores as tags (``eval.<set>.<metric>``) and the run's best version
(on ``tracking.promote.metric``) gets the run's own alias ``candidate-<parent run id[:12]>`` (and the global
``candidate``, the latest run's). The ``promote`` stage re-samples the candidate beside the champion
(``parathink.tracking.challenge``, paired); ``parathink promote`` compares the scores stored on the versions. Either
moves ``champion`` only when the candidate wins (docs/lifecycle.md), and records why on the candidate's version.
"""

from __future__ import annotations

from collections.abc import Mapping

CANDIDATE, CHAMPION = "candidate", "champion"


def registered_name(cfg) -> str:
    """The registered model a run's checkpoints become versions of."""
    return str(cfg.tracking.get("registered_model") or f"parathink-{cfg.experiment_name}")


def register_model(client, name: str, run_id: str, *, stage: str, tags: Mapping[str, str] | None = None,
                   source: str | None = None):
    """Register ``source`` (a logged model's ``models:/m-...``; default: the run's raw ``model`` artifact folder) as a
    new version of ``name``; returns the version."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException as err:
        if "RESOURCE_ALREADY_EXISTS" not in str(err.error_code):
            raise
    model_id = source[len("models:/"):] if source and source.startswith("models:/m-") else None
    source = source or f"{client.get_run(run_id).info.artifact_uri}/model"
    version = client.create_model_version(name, source=source, run_id=run_id, model_id=model_id,
                                          tags={"stage": stage, **dict(tags or {})})
    return version


def versions_of_run(client, name: str, stage_run_ids: Mapping[str, str]) -> dict[str, object]:
    """{stage: model version} for the stage runs given (their nested MLflow run ids)."""
    out = {}
    for stage, run_id in stage_run_ids.items():
        found = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
        if found:
            out[stage] = max(found, key=lambda v: int(v.version))
    return out


def tag_eval_results(client, name: str, results: dict, parent_run_id: str, *, metric: str) -> str | None:
    """Tag this run's model versions with their eval scores and point ``candidate`` at the best one.

    The stage runs are found as the parent's children tagged ``parathink.stage``. Returns the candidate's
    version number (None when no version has ``metric``).
    """
    from parathink.tracking.mlflow_tracker import clean_key

    runs = client.search_runs([client.get_run(parent_run_id).info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
    stage_runs = {r.data.tags.get("parathink.stage"): r.info.run_id for r in runs}
    versions = versions_of_run(client, name, {s: i for s, i in stage_runs.items() if s})
    best, best_value = None, float("-inf")
    for stage, version in versions.items():
        for tset, row in results.get("stages", {}).get(stage, {}).items():
            for key, value in row.items():
                if isinstance(value, (int, float)):
                    # clean_key: a tag name has no '@' (ParaThinker's rows are 'easy@4': tag eval.easy_4.*)
                    client.set_model_version_tag(name, version.version, clean_key(f"eval.{tset}.{key}"), str(value))
        value = metric_value(results, stage, metric)
        if value is not None and value > best_value:
            best, best_value = version.version, value
    if best is not None:
        # Per run: its own alias and a tag on the version, which a concurrent run cannot move. The global
        # `candidate` is only "the latest run's", a convenience for `parathink promote` by hand.
        client.set_registered_model_alias(name, run_candidate_alias(parent_run_id), best)
        client.set_model_version_tag(name, best, CANDIDATE_OF, parent_run_id)
        client.set_registered_model_alias(name, CANDIDATE, best)
    return best


CANDIDATE_OF = "parathink.candidate_of_run"  # on a version: the parent run whose best model it is


def run_candidate_alias(parent_run_id: str) -> str:
    """The alias of one run's candidate: ``candidate-<the parent run id's first 12 characters>``."""
    return f"{CANDIDATE}-{parent_run_id[:12]}"


def metric_value(results: dict, stage: str, metric: str) -> float | None:
    """``metric`` is ``<set>.<key>``, e.g. ``hard.accuracy``."""
    tset, _, key = metric.partition(".")
    value = results.get("stages", {}).get(stage, {}).get(tset, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def decide(candidate: float | None, champion: float | None, margin: float) -> tuple[bool, str]:
    """Promotion rule: the candidate must beat the champion by more than ``margin``."""
    if candidate is None:
        return False, "the candidate has no value for the metric (was it evaluated?)"
    if champion is None:
        return True, "there is no champion yet"
    if candidate > champion + margin:
        return True, f"{candidate:.4f} beats the champion's {champion:.4f} by more than {margin:g}"
    return False, f"{candidate:.4f} does not beat the champion's {champion:.4f} by more than {margin:g}"


def version_or_none(client, name: str, ref: str):
    """The version ``ref`` (a number or an alias) of model ``name``, or None when there is none."""
    from mlflow.exceptions import MlflowException

    try:
        if str(ref).isdigit():
            return client.get_model_version(name, str(ref))
        return client.get_model_version_by_alias(name, str(ref))
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise  # a server that failed to answer is not a missing model


PREVIOUS = "promotion.previous_champion"  # on a champion: the version it replaced ("none" for the first)


def _record(client, name: str, version: str, tags: Mapping[str, str]) -> None:
    """The decision on the version it is about, so the registry's page of a version says why it is (not) champion."""
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, str(value))


def promote(client, name: str, candidate_ref: str, metric: str, margin: float,
            decided_by: str | None = None) -> tuple[bool, str]:
    """Move ``champion`` to the candidate when its stored score wins; returns (promoted, why). The decision, the
    champion it was compared with and the run that decided (``decided_by``) are recorded as tags on the candidate's
    version. The scores compared are those each version's own run sampled (``tracking.promote.paired=false``)."""
    cand = version_or_none(client, name, candidate_ref)
    if cand is None:
        return False, f"{name}: no version or alias {candidate_ref!r}"
    key = f"eval.{metric}"
    cand_value = float(cand.tags[key]) if key in cand.tags else None
    champ = version_or_none(client, name, CHAMPION)
    if champ is not None and champ.version == cand.version:
        return False, f"{name} v{cand.version} is already the champion"
    champ_value = float(champ.tags[key]) if champ is not None and key in champ.tags else None
    ok, why = decide(cand_value, champ_value, margin)
    record = {"promotion.comparison": "stored" if champ is not None else "none",
              **({"promotion.decided_by_run": decided_by} if decided_by else {})}
    return apply_decision(client, name, cand, champ, ok, why, metric=metric, margin=margin, record=record)


def apply_decision(client, name: str, cand, champ, ok: bool, why: str, *, metric: str, margin: float,
                   record: Mapping[str, str]) -> tuple[bool, str]:
    """Record the decision on the candidate's version (with ``record``: how it was compared) and move ``champion``
    when ``ok``; (promoted, the line that says so)."""
    who = f"{name} v{cand.version} ({cand.tags.get('stage', '?')})"
    champ_txt = f"v{champ.version}" if champ is not None else "none"
    tags = {"promotion.decision": "promoted" if ok else "kept", "promotion.why": why, "promotion.metric": metric,
            "promotion.margin": margin, "promotion.compared_with": champ_txt, **dict(record)}
    if champ is None:
        tags["promotion.first_champion"] = "true"  # promoted with no champion to beat: nothing was compared
    if ok:
        _record(client, name, cand.version, {**tags, PREVIOUS: champ.version if champ is not None else "none"})
        client.set_registered_model_alias(name, CHAMPION, cand.version)
        return True, f"promoted {who} to {CHAMPION} on {metric}: {why}"
    _record(client, name, cand.version, tags)
    return False, f"kept {CHAMPION} {champ_txt}; {who} on {metric}: {why}"


def rollback(client, name: str, why: str) -> str:
    """Move ``champion`` back to the version the current one replaced, recording why on both; one line back."""
    from parathink.errors import ConfigError

    champ = version_or_none(client, name, CHAMPION)
    if champ is None:
        raise ConfigError(f"rollback: {name} has no {CHAMPION} to roll back")
    previous = champ.tags.get(PREVIOUS)
    if not previous or previous == "none":
        raise ConfigError(f"rollback: {name} v{champ.version} replaced no earlier {CHAMPION} (nothing to go back to)")
    if version_or_none(client, name, previous) is None:
        raise ConfigError(f"rollback: {name} v{previous}, the {CHAMPION} before v{champ.version}, no longer exists")
    client.set_registered_model_alias(name, CHAMPION, previous)
    _record(client, name, champ.version, {"promotion.decision": "rolled_back", "promotion.rolled_back_why": why})
    _record(client, name, previous, {"promotion.restored_from": champ.version, "promotion.restored_why": why})
    return f"rolled back {name} {CHAMPION} from v{champ.version} to v{previous}: {why}"

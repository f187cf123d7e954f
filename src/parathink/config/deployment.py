"""What a deployment sets for every run, from its environment, over the packaged cluster profiles.

A platform team points parathink at its registry, namespace, service account, MLflow and data without forking
``hydra_conf/cluster/*.yaml``: the chart (or any launcher) puts these variables in the environment of the processes
that plan and run stages, and :func:`overrides` turns them into config overrides that ``pipeline.compose`` applies
before the command line's (so an explicit ``cluster.image=...`` still wins, and a trigger form, which may not set
``cluster.*``, cannot). ``parathink plan`` prints each setting with where it came from (:func:`provenance`).

No torch, no Hydra: the plan task and the DAGs' helpers read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parathink.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    env: str  # the variable
    key: str  # the config key it sets
    what: str  # for the docs and the plan
    kind: str = "value"  # value | group (a config group choice) | list (comma-separated) | secret (NAME[:KEY])


SETTINGS = (
    Setting("PARATHINK_CLUSTER", "cluster", "the cluster profile (hydra_conf/cluster/NAME.yaml)", "group"),
    Setting("PARATHINK_IMAGE", "cluster.image", "the trainer image every stage pod runs (pin a digest)"),
    Setting("PARATHINK_IMAGE_PULL_POLICY", "cluster.image_pull_policy", "the stage pods' imagePullPolicy"),
    Setting("PARATHINK_NAMESPACE", "cluster.namespace", "the namespace stage pods and TrainJobs run in"),
    Setting("PARATHINK_SERVICE_ACCOUNT", "cluster.service_account", "the stage pods' service account"),
    Setting("PARATHINK_RUNS_ROOT", "cluster.runs_root", "where run directories go (s3://bucket/prefix)"),
    Setting("PARATHINK_MLFLOW_URI", "cluster.env.MLFLOW_TRACKING_URI", "the MLflow server stage pods log to"),
    Setting("PARATHINK_HF_ENDPOINT", "cluster.env.HF_ENDPOINT", "a model hub mirror the hub stages download from"),
    Setting("PARATHINK_HF_TOKEN_SECRET", "cluster.secrets.HF_TOKEN", "the Secret (NAME[:KEY], key 'token') of a "
            "hub token, for gated models", "secret"),
    Setting("PARATHINK_DATA_ROOTS", "cluster.data_roots", "where a trigger form may point data and eval URIs",
            "list"),
)
BY_KEY = {s.key: s for s in SETTINGS}


def _value(s: Setting, raw: str) -> str:
    raw = raw.strip()
    if s.kind == "list":
        items = [r.strip() for r in raw.split(",") if r.strip()]
        return "[" + ",".join(f"'{r}'" for r in items) + "]"
    if s.kind == "secret":
        name, _, key = raw.partition(":")
        if not name:
            raise ConfigError(f"{s.env}={raw!r}: expected a Secret NAME or NAME:KEY")
        return "{secret: '" + name + "', key: '" + (key or "token") + "'}"
    if any(c in raw for c in "\n'"):
        raise ConfigError(f"{s.env}: a value with a quote or a newline is not a {s.key}")
    return raw if s.kind == "group" else f"'{raw}'"


def overrides(env: Mapping[str, str], given: list[str] = ()) -> list[str]:
    """The overrides the deployment's ``env`` sets, leaving out every key ``given`` (the caller's overrides)
    sets itself: those win."""
    taken = {o.split("=", 1)[0].lstrip("+~") for o in given}
    out = []
    for s in SETTINGS:
        if env.get(s.env, "").strip() and s.key not in taken:
            prefix = "+" if s.kind == "secret" else ""  # a secret the profile does not declare is added
            out.append(f"{prefix}{s.key}={_value(s, env[s.env])}")
    return out


def provenance(env: Mapping[str, str], given: list[str], cfg) -> dict[str, dict[str, str]]:
    """Each deployment setting's value in ``cfg`` and where it came from: the command line, the environment
    variable, or the cluster profile."""
    from omegaconf import OmegaConf

    taken = {o.split("=", 1)[0].lstrip("+~") for o in given}
    out = {}
    for s in SETTINGS:
        value = OmegaConf.select(cfg, s.key if s.kind != "group" else "cluster.name", default=None)
        if isinstance(value, (list, dict)) or OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        if s.key in taken:
            source = "command line"
        elif env.get(s.env, "").strip():
            source = f"environment {s.env}"
        elif value is None:
            source = "unset"
        else:
            source = f"hydra_conf/cluster/{OmegaConf.select(cfg, 'cluster.name')}.yaml"
        out[s.key] = {"value": value, "from": source}
    return out

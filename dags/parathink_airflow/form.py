"""The trigger form's values turned into ``parathink`` arguments, checked before any stage starts.

Form values reach ``parathink`` as separate argv entries, never through a shell. What this module refuses
fails the DAG's first task in seconds with one line naming the field; everything else about the config is
checked by ``parathink plan`` itself, the same way ``parathink run`` checks it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXECUTORS = ("local", "kubernetes", "kfp")
# A Hydra override: key=value, with + (add a key), ++ (add or replace) or ~ (delete) before the key. No value holds
# a '$' (interpolations and resolvers, ${oc.env:...} among them, in any escape) nor a control character.
# ~key alone deletes whatever the value (its key in the third group).
OVERRIDE = re.compile(r"(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_.@/\-]*)=[^$\x00-\x1f\x7f]*|~([A-Za-z_][A-Za-z0-9_.@/\-]*)")
# The same rule in the form's JSON schema (without an allowlist); (?![\s\S]) ends the string, as END below.
OVERRIDE_PATTERN = f"^(?:{OVERRIDE.pattern})(?![\\s\\S])"
# The pieces of the allowlist's pattern, as parathink.form_policy has them (tests/dags/test_dag_form.py keeps the two
# patterns equal): dotted keys (no '@' package, no '/' group), no '$' in a value, groups chosen by a file's name.
KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*"
VALUE = r"[^$\x00-\x1f\x7f]*"
# The end of the string: `$` would also match before a final newline in Python's re.search (how jsonschema applies
# a pattern), not in ECMAScript.
END = r"(?![\s\S])"
# At most this many characters an override and this many overrides a form: Hydra parses a long list slowly (a
# 100 KB value of 20,000 items kept `plan` busy for minutes), and a researcher's override is a line.
MAX_CHARS = 2048
MAX_OVERRIDES = 100
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
GLOB = re.compile(r"[A-Za-z0-9_.*]+")  # a key glob of hydra_conf/form_allowlist.yaml
# Set through their own form fields; an override of them would fight the field.
FORM_KEYS = ("experiment", "run_dir", "seed", "stages")
# A run directory goes into one `run_dir=...` override: no spaces, quotes, commas or brackets, which Hydra
# would parse as syntax.
RUN_DIR = re.compile(r"[A-Za-z0-9_.@/:~+\-]+")
EXPERIMENT = re.compile(r"[A-Za-z0-9_\-]+")  # a file of hydra_conf/experiment/, nothing Hydra would parse as syntax
RUN_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


class FormError(ValueError):
    """A form value that cannot become a parathink argument (the message names the field)."""


@dataclass(frozen=True)
class Form:
    """One DAG run's form (``params``), checked."""

    experiment: str
    stages: tuple[str, ...]  # empty: the experiment's own list
    run_dir: str | None  # None: one folder per DAG run under the cluster profile's runs_root
    seed: int | None  # None: derived from the run's date (the nightly DAG)
    overrides: tuple[str, ...]
    executor: str
    promote: bool

    @classmethod
    def read(cls, params: Mapping[str, Any]) -> Form:
        executor = params.get("executor", "local")
        if executor not in EXECUTORS:
            raise FormError(f"executor: must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        run_dir = params.get("run_dir") or None
        if run_dir is not None and not RUN_DIR.fullmatch(str(run_dir)):
            raise FormError(f"run_dir: {run_dir!r} must be a path or s3:// URI without spaces, quotes, commas "
                            f"or brackets")
        if not EXPERIMENT.fullmatch(str(params["experiment"])):
            raise FormError(f"experiment: {params['experiment']!r} is not the name of an experiment "
                            f"(a file of hydra_conf/experiment/)")
        seed = params.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise FormError(f"seed: must be an integer, got {seed!r}")
        return cls(experiment=str(params["experiment"]), stages=tuple(params.get("stages") or ()),
                   run_dir=run_dir, seed=seed, overrides=check_overrides(params.get("overrides") or ()),
                   executor=executor, promote=bool(params.get("promote", False)))


def check_overrides(overrides: Sequence[Any]) -> tuple[str, ...]:
    """The overrides as given, or FormError naming the first one that is not ``key=value``."""
    if isinstance(overrides, str):
        raise FormError("overrides: must be a list of key=value strings, one per line")
    if len(overrides) > MAX_OVERRIDES:
        raise FormError(f"overrides: {len(overrides)} of them, more than the {MAX_OVERRIDES} a form may give")
    for i, item in enumerate(overrides):
        match = OVERRIDE.fullmatch(item) if isinstance(item, str) and len(item) <= MAX_CHARS else None
        if match is None:
            raise FormError(f"overrides[{i}]: {item!r} is not a Hydra override of the form key=value")
        if _key(match) in FORM_KEYS:
            raise FormError(f"overrides[{i}]: {item!r} sets {_key(match)}, which has its own field in the form")
    return tuple(overrides)


def _key(match: re.Match) -> str:
    return match.group(2) or match.group(3)


def _glob(glob: str) -> str:
    if not GLOB.fullmatch(glob):
        raise FormError(f"form allowlist: {glob!r} is not a key glob (letters, digits, _ . and *)")
    return glob.replace(".", r"\.").replace("*", "[A-Za-z0-9_.]*") + r"(?:\.[A-Za-z0-9_.]*)?"


def allowlist_pattern(groups: Mapping[str, Sequence[str]], chosen: Sequence[str], allow: Sequence[str],
                      deny: Sequence[str], widened: Sequence[str] = ()) -> str:
    """hydra_conf/form_allowlist.yaml as the JSON-schema pattern of one override (Python's re and ECMAScript alike).

    ``groups``: every config group beside the DAGs and its files; ``chosen``: the allowlist's groups, each chosen by
    the name of one of its files and nothing else (``data=gsm8k``, never a path). Any other key matches an ``allow``
    glob and no ``deny`` glob, or one the deployment added (``widened``: PARATHINK_FORM_ALLOW), and names no group;
    no value holds a ``$``. This is parathink.form_policy.pattern, the check ``parathink plan --form`` applies first,
    copied because the DAG folder imports nothing of parathink (tests/dags/test_dag_form.py keeps the two equal);
    ``plan`` then checks what the overrides change in the composed config, which no pattern can.
    """
    def either(globs: Sequence[str]) -> str:
        return "|".join(_glob(g) for g in globs) or "(?!)"

    choices = "|".join(f"{g}=(?:{'|'.join(groups[g])})" for g in chosen if groups.get(g)) or "(?!)"
    others = "|".join(groups) or "(?!)"

    def key(end: str) -> str:  # an allowed key that names no group, followed by `end`
        keys = f"(?:{either(widened)})|(?!(?:{either(deny)}){end})(?:{either(allow)})"
        return f"(?={KEY}{end})(?!(?:{others}){end})(?:{keys}){end}"

    # key=value with +, ++ or ~ before it; or ~key (Hydra's delete, whatever the value)
    return rf"^(?=[\s\S]{{0,{MAX_CHARS}}}{END})(?:{choices}|(?:\+\+|\+|~)?{key('=')}{VALUE}|~{key(END)}){END}"


def config_groups(root: Path) -> dict[str, tuple[str, ...]]:
    """Every config group of the folder ``root`` and the names of its files, as parathink.form_policy lists them."""
    out = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        names = sorted(p.stem for p in folder.glob("*.yaml") if NAME.fullmatch(p.stem))
        if names:
            out[folder.name] = tuple(names)
    return out


def schema_pattern(root: Path, widened: Sequence[str] = ()) -> str:
    """The overrides' pattern from ``root``/form_allowlist.yaml and the group folders beside it."""
    doc = yaml.safe_load((root / "form_allowlist.yaml").read_text(encoding="utf-8"))
    return allowlist_pattern(config_groups(root), doc["groups"] or (), doc["allow"] or (), doc["deny"] or (),
                             widened)


def run_name(run_id: str) -> str:
    """A DAG run id as a folder name (run ids carry ':' and '+')."""
    return RUN_NAME_UNSAFE.sub("-", run_id).strip("-")


def default_run_dir(dag_id: str, name: str) -> str:
    """Under the cluster profile's ``runs_root``, which ``parathink plan`` resolves (Hydra interpolation)."""
    return f"${{cluster.runs_root}}/{dag_id}/{name}"


def sets_tracking(overrides: Sequence[str]) -> bool:
    """Whether the user chose the tracking store (group or URI) in the overrides."""
    keys = {_key(OVERRIDE.fullmatch(o)) for o in overrides}
    return bool(keys & {"tracking", "tracking.uri"})


# The deployment's plain settings and the config keys they set: parathink.config.deployment's, written here again
# because the DAGs parse without parathink installed (tests/dags/test_dag_form.py keeps the two lists equal).
# PARATHINK_DATA_ROOTS is read by the form's policy where the plan runs; PARATHINK_HF_TOKEN_SECRET becomes a Secret.
DEPLOYMENT_KEYS = {"PARATHINK_IMAGE": "cluster.image", "PARATHINK_IMAGE_PULL_POLICY": "cluster.image_pull_policy",
                   "PARATHINK_NAMESPACE": "cluster.namespace", "PARATHINK_SERVICE_ACCOUNT": "cluster.service_account",
                   "PARATHINK_MLFLOW_URI": "cluster.env.MLFLOW_TRACKING_URI",
                   "PARATHINK_HF_ENDPOINT": "cluster.env.HF_ENDPOINT"}


def deployment_overrides(env: Mapping[str, str]) -> list[str]:
    """What the deployment fixes for every run (helm/airflow-values.yaml ``env``), before the form's overrides:
    ``PARATHINK_CLUSTER`` (a file of hydra_conf/cluster/), ``PARATHINK_RUNS_ROOT`` (where run directories go), the
    image, namespace, service account, MLflow and hub settings (``DEPLOYMENT_KEYS``) and the hub token's Secret.
    Every ``parathink`` call of the run gets them, the stage pods' included, so all compose the same config."""
    out = []
    if env.get("PARATHINK_CLUSTER"):
        out.append(f"cluster={env['PARATHINK_CLUSTER']}")
    if env.get("PARATHINK_RUNS_ROOT"):
        out.append(f"cluster.runs_root={env['PARATHINK_RUNS_ROOT']}")
    for var, key in DEPLOYMENT_KEYS.items():
        value = env.get(var, "").strip()
        if value:
            if "'" in value or "\n" in value:
                raise FormError(f"{var}: a value with a quote or a newline is not a {key}")
            out.append(f"{key}='{value}'")
    secret = env.get("PARATHINK_HF_TOKEN_SECRET", "").strip()
    if secret:
        name, _, key = secret.partition(":")
        out.append("+cluster.secrets.HF_TOKEN={secret: '" + name + "', key: '" + (key or "token") + "'}")
    return out


def arguments(experiment: str, *, run_dir: str, seed: int, stages: Sequence[str] | None,
              overrides: Sequence[str], tracking_uri: str | None = None, deployment: Sequence[str] = ()) -> list[str]:
    """The overrides every ``parathink`` call of a run gets: the run's, the deployment's, the user's last (they
    win where the form's allowlist lets them)."""
    args = [f"experiment={experiment}", *deployment, f"run_dir={run_dir}", f"seed={seed}"]
    if stages is not None:
        args.append(f"stages=[{','.join(stages)}]")
    if tracking_uri and not sets_tracking(overrides):
        args.append(f"tracking.uri={tracking_uri}")
    return args + list(overrides)


def check_for_pods(plan: Mapping[str, Any], max_retries: int) -> None:
    """What ``executor=kubernetes`` needs beyond a valid config; FormError names the stage and the setting.

    Where pods find the run directory is ``parathink plan``'s ``pod_run_dir`` (placement.cluster.pod_run_dir: a
    relative run_dir moves under a shared runs_root); null means no pod can see it.
    """
    volume = next((p.get("volume") for p in plan["placement"].values()), None)
    if plan.get("pod_run_dir") is None:
        where = f"under the cluster profile's volume {volume['mount_path']}" if volume else "(no volume is set)"
        raise FormError(f"run_dir: {plan['run_dir']!r} is not visible to pods; use s3:// or a path {where}")
    for stage, place in plan["placement"].items():
        if place["nodes"] > 1:
            raise FormError(f"{stage}: the cluster profile gives it {place['nodes']} nodes, a Kubeflow Trainer "
                            f"TrainJob that executor=kubernetes does not launch; use executor=kfp")
    check_retries(plan, max_retries)


def check_timeouts(plan: Mapping[str, Any], max_timeout_s: int) -> None:
    """Airflow fixes a task's execution_timeout at parse time; each stage's ``timeout_s`` (its pod's deadline) must
    end first, so that the pod, not Airflow, stops a hung stage and says why."""
    for stage, place in plan["placement"].items():
        if place["timeout_s"] >= max_timeout_s:
            raise FormError(f"{stage}: cluster timeout_s={place['timeout_s']} is not below this DAG's task timeout "
                            f"of {max_timeout_s} s (PARATHINK_MAX_TIMEOUT_S)")


def check_retries(plan: Mapping[str, Any], max_retries: int) -> None:
    """Airflow fixes a task's retry ceiling at parse time; the profile's count must fit under it."""
    for stage, place in plan["placement"].items():
        if place["retries"] > max_retries:
            raise FormError(f"{stage}: cluster retries.max={place['retries']} is above this DAG's ceiling of "
                            f"{max_retries} (PARATHINK_MAX_RETRIES)")

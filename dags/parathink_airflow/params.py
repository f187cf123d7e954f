"""The trigger form: one ``Param`` per field, each with a title and a description a user reads without the code."""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import Param

from parathink_airflow.chain import CANONICAL
from parathink_airflow.form import EXECUTORS, MAX_CHARS, MAX_OVERRIDES, OVERRIDE_PATTERN, schema_pattern
from parathink_airflow.local import CHECKOUT

WIDEN_ENV = "PARATHINK_FORM_ALLOW"  # the deployment's own globs (helm/airflow-values.yaml), never the form's


def config_root() -> Path:
    return Path(os.environ.get("PARATHINK_CONFIG_DIR") or CHECKOUT / "hydra_conf")


def deployment_default(name: str, fallback: str, choices: list[str]) -> str:
    """A form default the deployment sets (PARATHINK_DEFAULT_*, helm/airflow-values.yaml); a value the form could
    not offer fails the DAG's parse with one line instead of the first run an hour later."""
    value = os.environ.get(name) or fallback
    if choices and value not in choices:
        raise ValueError(f"{name}={value!r}: not one of {', '.join(choices)}")
    return value


def experiments() -> list[str]:
    """The files of ``hydra_conf/experiment/`` (or ``$PARATHINK_CONFIG_DIR/experiment``); empty when not found."""
    return sorted(p.stem for p in (config_root() / "experiment").glob("*.yaml"))


def override_pattern() -> str:
    """The overrides' JSON-schema pattern from ``hydra_conf/form_allowlist.yaml``, the group folders beside it and
    the deployment's additions: the pattern ``parathink plan --form`` applies first (parathink.form_policy).

    Without the file beside the DAGs the schema checks the syntax only; ``parathink plan --form`` (the DAG's first
    task) applies the package's own copy of the file either way.
    """
    root = config_root()
    if not (root / "form_allowlist.yaml").is_file():
        return OVERRIDE_PATTERN
    widened = [g.strip() for g in os.environ.get(WIDEN_ENV, "").split(",") if g.strip()]
    return schema_pattern(root, widened)


def form(*, promote: bool, nightly: bool) -> dict[str, Param]:
    names = experiments()
    choice = {"enum": names} if names else {}  # no config folder beside the DAGs: `parathink plan` checks the name
    return {
        "experiment": Param(
            deployment_default("PARATHINK_DEFAULT_EXPERIMENT", "tiny", names), type="string", title="Experiment",
            **choice,
            description="A file of hydra_conf/experiment/: the model, data and every stage's settings. "
                        "tiny runs on a laptop's CPU in about 20 minutes; the others expect GPUs."),
        "stages": Param(
            [], type=["null", "array"], title="Stages", examples=list(CANONICAL),
            items={"type": "string", "enum": list(CANONICAL)},
            description="The curriculum stages to run, in the curriculum's order. Empty: the experiment's own "
                        "list. A stage whose output is already up to date in the run directory is skipped."),
        "run_dir": Param(
            None, type=["null", "string"], title="Run directory",
            description="Where the stages' outputs and manifests go: a local path or an s3:// URI. Empty: "
                        + ("one folder per night (its date)" if nightly else "one folder per DAG run")
                        + " under the cluster profile's runs_root. Reuse a directory to resume a run."),
        "seed": Param(
            None if nightly else 0, type=["null", "integer"] if nightly else "integer", title="Seed",
            description=("Empty: the night's date (YYYYMMDD), so each night draws fresh synthetic problems. "
                         if nightly else "") + "Seeds the problems, sampling and training."),
        "overrides": Param(
            [], type=["null", "array"], title="Overrides", maxItems=MAX_OVERRIDES,
            items={"type": "string", "maxLength": MAX_CHARS, "pattern": override_pattern()},
            description="Extra Hydra overrides, one key=value per line, e.g. sft.lr=1e-5 or tracking=none: stage "
                        "settings, data specs and eval settings (docs/airflow.md lists them). Placement, images, "
                        "secrets, models to load and code are the deployment's, not the form's. The whole config "
                        "is checked before any stage starts."),
        "executor": Param(
            deployment_default("PARATHINK_DEFAULT_EXECUTOR", "local", list(EXECUTORS)), type="string",
            title="Executor", enum=list(EXECUTORS),
            values_display={"local": "local: a subprocess running the project's parathink",
                            "kubernetes": "kubernetes: one pod per stage on the cluster profile's node pools",
                            "kfp": "kfp: the stages as one Kubeflow pipeline"},
            description="Where the stages run. Placement (GPUs, node pool, secrets) comes from the experiment's "
                        "cluster profile (hydra_conf/cluster/)."),
        "promote": Param(
            promote, type="boolean", title="Promote",
            description="After eval, move the registry's champion alias to this run's best model when it beats "
                        "the champion by the configured margin (tracking.promote). Needs MLflow tracking."),
    }

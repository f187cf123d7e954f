"""Where a run came from, as MLflow tags: the code, the image, the orchestrator's run, the config, the run directory.

A user who finds a run in MLflow's table must be able to tell it from its neighbours at a glance (the run name) and
trace it back to the commit, the container image and the Airflow or Kubeflow run that made it (the tags). Every
value is read from the process's environment or the source tree, so the same tags appear whether the stage ran on a
laptop, in an Airflow task or in a pod; an orchestrator passes what only it knows through environment variables:

- ``PARATHINK_GIT_COMMIT``: the commit the code came from, where a launcher knows it and there is no checkout.
- ``PARATHINK_IMAGE``, ``PARATHINK_IMAGE_DIGEST``: the image reference and digest a pod runs (the placement sets both;
  the digest when the deployment pins the image by one, ``repo@sha256:...``).
- ``PARATHINK_BUILD_INPUTS``: baked into every image by ``images/build.sh``: the digest of what it was built from
  (its Dockerfile's options, its base images, every source file it copies). An image cannot hold its own digest (the
  digest covers the config the variable would be in); this is the identity a pod of an image pinned by tag still has.
- ``AIRFLOW_CTX_DAG_ID``, ``AIRFLOW_CTX_DAG_RUN_ID``, ``AIRFLOW_CTX_TRY_NUMBER``: Airflow's own task context
  variables (Airflow sets them for a task's subprocesses; the DAG forwards them into a stage pod).
- ``PARATHINK_KFP_RUN_ID``: the Kubeflow Pipelines run (the component passes its job-id placeholder, the key of
  its verdicts, to the stage's process; a multi-node stage's TrainJob pods do not get it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import parathink

SOURCE_DIR = Path(parathink.__file__).resolve().parent

# environment variable -> tag. mlflow.source.* are MLflow's own tags: its runs table shows them in "Source".
ENV_TAGS = {
    "PARATHINK_IMAGE": "parathink.image",
    "PARATHINK_IMAGE_DIGEST": "parathink.image_digest",
    "PARATHINK_BUILD_INPUTS": "parathink.build_inputs",
    "AIRFLOW_CTX_DAG_ID": "airflow.dag_id",
    "AIRFLOW_CTX_DAG_RUN_ID": "airflow.run_id",
    "AIRFLOW_CTX_TRY_NUMBER": "airflow.try_number",
    "PARATHINK_KFP_RUN_ID": "kfp.run_id",
}


def git_state(source_dir: Path = SOURCE_DIR) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout the package runs from; (None, None) outside one (an installed wheel)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(source_dir), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def lineage_tags(environ: Mapping[str, str], *, run_dir: str, config_hash: str,
                 git: tuple[str | None, bool | None] = (None, None)) -> dict[str, str]:
    """The tags every parent and stage run carries. ``git`` is ``git_state()``'s answer; a commit baked into the
    image (``PARATHINK_GIT_COMMIT``) stands in where there is no checkout."""
    commit, dirty = git
    commit = commit or environ.get("PARATHINK_GIT_COMMIT") or None
    tags = {"parathink.version": parathink.__version__, "parathink.run_dir": run_dir,
            "parathink.config_hash": config_hash,
            # MLflow's runs table shows these in its Source column (a run made through MlflowClient has none: "-").
            "mlflow.source.name": source_name(environ), "mlflow.source.type": "LOCAL"}
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["parathink.git_commit"] = commit
        tags["parathink.git_dirty"] = "unknown" if dirty is None else str(dirty).lower()
    tags.update({tag: environ[var] for var, tag in ENV_TAGS.items() if environ.get(var)})
    return tags


def source_name(environ: Mapping[str, str]) -> str:
    """What started the run, for MLflow's Source column: the Airflow DAG, the KFP run, or the command line."""
    if environ.get("AIRFLOW_CTX_DAG_ID"):
        return f"airflow:{environ['AIRFLOW_CTX_DAG_ID']}"
    if environ.get("PARATHINK_KFP_RUN_ID"):
        return "kfp:parathink"
    return "parathink"


def run_name(experiment: str, *, seed: int, run_dir: str, environ: Mapping[str, str],
             now: datetime | None = None) -> str:
    """``<experiment> <date> seed <s> <who>``: who is the Airflow or KFP run id when there is one, else the run
    directory's last two folders (``runs/a/r`` and ``runs/b/r`` differ; the last folder alone did not)."""
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M")
    who = environ.get("AIRFLOW_CTX_DAG_RUN_ID") or environ.get("PARATHINK_KFP_RUN_ID")
    if not who:
        parts = [p for p in run_dir.rstrip("/").replace("s3://", "").split("/") if p]
        who = "/".join(parts[-2:]) or run_dir
    return f"{experiment} {when} seed {seed} {who}"

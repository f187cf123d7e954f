"""MLflow underneath the tracking interface: one parent run per curriculum run, one nested run per stage.

The tracker is bound to an explicit run id and talks through ``MlflowClient`` (no fluent ``mlflow.start_run``
global state), so the runner can hand each stage its own tracker, and a resumed stage can write into the
same nested run it started before it was killed: its metric history stays one continuous curve.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# MLflow accepts alphanumerics, underscores, dashes, periods, spaces, colons and slashes in keys.
_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")
_MAX_PARAM = 6000  # MLflow's limit on a param value's length
_BATCH = 900  # log_batch takes at most 1000 metrics / 100 params per call
# MLflow 3 sorts experiments into GenAI apps and model training; this tag declares ours model training (runs,
# metrics, charts), as the experiment-type selector of MLflow's UI records it. MLflow 3.17's UI still opens the view
# the browser last used unless the link says ?workflowType=machine_learning (docs/airflow.md).
KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = {KIND_TAG: "custom_model_development"}


def clean_key(key: str) -> str:
    return _BAD_KEY.sub("_", str(key))


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> {"a.b.0": leaf}; used for params from the config."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)) and obj and all(isinstance(v, Mapping) for v in obj):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix.rstrip(".")] = obj
    return out


class MlflowTracker:
    """``Tracker`` bound to one MLflow run."""

    def __init__(self, client, run_id: str):
        self.client = client
        self.run_id = run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(self.run_id).data.params
        items = []
        for k, v in flatten(dict(params)).items():
            key, value = clean_key(k), str(v)[:_MAX_PARAM]
            if key not in existing:  # params are immutable in MLflow; a resumed run logs them once
                items.append(Param(key, value))
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = []
        for k, v in metrics.items():
            try:
                value = float(v)
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                items.append(Metric(clean_key(k), value, now, int(step or 0)))
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + _BATCH])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, clean_key(k), str(v))


class MlflowSession:
    """The curriculum run's MLflow side: experiment, parent run, nested stage runs."""

    def __init__(self, uri: str, experiment: str, artifact_location: str | None = None):
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(uri)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifact_location,
                                                               tags=EXPERIMENT_KIND)
        else:
            self.experiment_id = exp.experiment_id
            if exp.tags.get(KIND_TAG) is None:  # made before parathink tagged its experiments
                self.client.set_experiment_tag(self.experiment_id, KIND_TAG, EXPERIMENT_KIND[KIND_TAG])

    def _alive(self, run_id: str | None) -> bool:
        if not run_id:
            return False
        try:
            run = self.client.get_run(run_id)
        except Exception:  # unknown id (e.g. another tracking store): start a new run
            return False
        return run.info.experiment_id == self.experiment_id and run.info.lifecycle_stage == "active"

    def open_run(self, run_id: str | None, name: str, parent_id: str | None = None,
                 tags: Mapping[str, str] | None = None) -> MlflowTracker:
        """Reopen ``run_id`` when it exists (resume), else create a run (nested under ``parent_id``)."""
        if self._alive(run_id):
            self.client.update_run(run_id, status="RUNNING")
            return MlflowTracker(self.client, run_id)
        all_tags = {"mlflow.runName": name, **(tags or {})}
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=name)
        return MlflowTracker(self.client, run.info.run_id)

    def close_run(self, tracker: MlflowTracker, status: str = "FINISHED") -> None:
        self.client.set_terminated(tracker.run_id, status=status)

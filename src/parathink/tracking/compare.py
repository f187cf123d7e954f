"""``parathink compare RUN_A RUN_B [RUN ...]``: runs' result tables side by side.

Two runs: each cell as ``A | B``. Three or more, or ``--rows``: one table, a row per run and stage, so the NPR and
ParaThinker recipes' rows stand beside Parallel-R1's.

A run is named by its run directory (local or s3://; its ``eval/results.json`` is read) or by its MLflow
parent run id (the ``results.json`` artifact the runner logged there; tracking URI from the config or
``--tracking-uri``).
"""

from __future__ import annotations

import tempfile

from parathink import storage
from parathink.evaluation import results as results_file
from parathink.evaluation.results import Results


def _from_mlflow(run_id: str, tracking_uri: str) -> Results:
    from mlflow.exceptions import MlflowException

    from parathink.tracking.reachable import client

    mlflow = client(tracking_uri)  # an unreachable server is said so, not reported as a missing artifact
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.download_artifacts(run_id, "results.json", tmp)
            return results_file.parse(open(path, "rb").read(), f"MLflow run {run_id}: results.json")
    except (MlflowException, OSError) as err:
        raise FileNotFoundError(f"MLflow run {run_id}: no results.json artifact ({type(err).__name__})") from err


def load_results(ref: str, tracking_uri: str | None) -> Results:
    """results.json of a run directory (``<ref>/eval/results.json``) or of an MLflow run (``runs:<id>`` or id)."""
    if ref.startswith("runs:"):
        return _from_mlflow(ref.split(":", 1)[1].strip("/"), tracking_uri or "")
    for uri in (storage.join(ref, "eval", "results.json"), storage.join(ref, "results.json")):
        if storage.exists(uri) and not storage.list_files(uri):  # a file, not a folder
            return results_file.parse(storage.read_bytes(uri), uri)
    if tracking_uri and len(ref) == 32 and all(c in "0123456789abcdef" for c in ref):
        return _from_mlflow(ref, tracking_uri)
    raise FileNotFoundError(f"{ref}: no eval/results.json there (give a run directory or an MLflow run id)")

"""``parathink compare RUN_A RUN_B``: two runs' result tables side by side.

A run is named by its run directory (local or s3://; its ``eval/results.json`` is read) or by its MLflow
parent run id (the ``results.json`` artifact the runner logged there; tracking URI from the config or
``--tracking-uri``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from parathink import storage


def _from_mlflow(run_id: str, tracking_uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            with open(client.download_artifacts(run_id, "results.json", tmp)) as f:
                return json.load(f)
    except Exception as err:
        raise FileNotFoundError(f"MLflow run {run_id}: no results.json artifact ({type(err).__name__})") from err


def load_results(ref: str, tracking_uri: str | None) -> dict:
    """results.json of a run directory (``<ref>/eval/results.json``) or of an MLflow run (``runs:<id>`` or id)."""
    if ref.startswith("runs:"):
        return _from_mlflow(ref.split(":", 1)[1].strip("/"), tracking_uri or "")
    for uri in (storage.join(ref, "eval", "results.json"), storage.join(ref, "results.json")):
        if storage.exists(uri) and not storage.list_files(uri):  # a file, not a folder
            return json.loads(storage.read_text(uri))
    if tracking_uri and len(ref) == 32 and all(c in "0123456789abcdef" for c in ref):
        return _from_mlflow(ref, tracking_uri)
    raise FileNotFoundError(f"{ref}: no eval/results.json there (give a run directory or an MLflow run id)")


def main_compare(argv: list[str]) -> int:
    from parathink.evaluation.table import format_compare
    from parathink.stages.runner import _guard

    parser = argparse.ArgumentParser(prog="parathink compare")
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (for run ids)")
    args = parser.parse_args(argv)

    def go():
        uri = args.tracking_uri
        if uri is None:
            from parathink.stages.runner import compose

            uri = str(compose([]).tracking.uri)
        a, b = load_results(args.run_a, uri), load_results(args.run_b, uri)
        print(f"A = {args.run_a}\nB = {args.run_b}\n")
        print(format_compare(a, b))
    return _guard(go)


if __name__ == "__main__":
    sys.exit(main_compare(sys.argv[1:]))

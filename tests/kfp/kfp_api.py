"""A stand-in for the Kubeflow Pipelines API server: the v2beta1 REST calls that ``kfp.Client`` makes to submit a
run and follow it, on 127.0.0.1, keeping what it was sent.

Why not the real one: the KFP API server is a Go service that needs MySQL (or PostgreSQL), object storage and a
Kubernetes cluster with Argo Workflows; no Go module proxy or image registry is reachable here to build or pull it.
This server answers only the calls the submit path makes (healthz, list/create experiment, create/get run), in the
shapes of KFP's v2beta1 API (backend/api/v2beta1/*.proto), and plays the run to ``final_state``.
"""

from __future__ import annotations

import json
import uuid

from json_server import JsonServer

PREFIX = "/apis/v2beta1"


class KfpApiServer(JsonServer):
    def __init__(self, final_state: str = "SUCCEEDED", failed_task: str | None = None):
        self.final_state, self.failed_task = final_state, failed_task
        self.experiments: list[dict] = []
        self.runs: dict[str, dict] = {}
        super().__init__(self.route)

    # ------------------------------------------------------------------ the API

    def list_experiments(self, query: dict) -> dict:
        wanted = None
        if "filter" in query:
            predicates = json.loads(query["filter"][0])["predicates"]
            wanted = {p["stringValue"] for p in predicates if p["key"] == "display_name"}
        found = [e for e in self.experiments if wanted is None or e["display_name"] in wanted]
        return {"experiments": found, "total_size": len(found)} if found else {}

    def create_experiment(self, body: dict) -> dict:
        experiment = {**body, "experiment_id": str(uuid.uuid4()), "storage_state": "AVAILABLE"}
        self.experiments.append(experiment)
        return experiment

    def create_run(self, body: dict) -> dict:
        run = {**body, "run_id": str(uuid.uuid4()), "state": "PENDING"}
        self.runs[run["run_id"]] = run
        return run

    def get_run(self, run_id: str) -> dict | None:
        run = self.runs.get(run_id)
        if run is None:
            return None
        run["state"] = self.final_state
        if self.failed_task:
            run["run_details"] = {"task_details": [{"display_name": self.failed_task, "state": "FAILED"}]}
        return run

    def route(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        if method == "GET" and path == f"{PREFIX}/healthz":
            return 200, {"multi_user": False}
        if path == f"{PREFIX}/experiments":
            return 200, self.list_experiments(query) if method == "GET" else self.create_experiment(body)
        if method == "POST" and path == f"{PREFIX}/runs":
            return 200, self.create_run(body)
        if method == "GET" and path.startswith(f"{PREFIX}/runs/"):
            run = self.get_run(path.rsplit("/", 1)[1])
            return (200, run) if run else (404, {"error": "run not found", "code": 5})
        return 404, {"error": f"{method} {path} is not served here", "code": 12}

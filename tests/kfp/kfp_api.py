"""A stand-in for the Kubeflow Pipelines API server: the v2beta1 REST calls that ``kfp.Client`` makes to submit a
run and follow it, on 127.0.0.1, keeping what it was sent.

Why not the real one: the KFP API server is a Go service that needs MySQL (or PostgreSQL), object storage and a
Kubernetes cluster with Argo Workflows; no Go module proxy or image registry is reachable here to build or pull it.
This server answers only the calls the submit path makes (healthz, list/create experiment, list/create/get run), in the
shapes of KFP's v2beta1 API (backend/api/v2beta1/*.proto), and plays the run to ``final_state``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PREFIX = "/apis/v2beta1"

# route(method, path, query, body) -> (status, payload)
Route = Callable[[str, str, dict, dict], tuple[int, dict]]


class JsonServer:
    """JSON over HTTP on 127.0.0.1 (a free port); every request goes to ``route``."""

    def __init__(self, route: Route):
        self.calls: list[tuple[str, str]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(route))
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> JsonServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self, route: Route):
        calls, authorizations = self.calls, self.authorizations

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                calls.append((self.command, url.path))
                authorizations.append(self.headers.get("Authorization"))
                status, payload = route(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args):  # the test's log stays the test's
                pass

        return Handler


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

    def list_runs(self, query: dict) -> dict:
        """KFP's filter is protobuf JSON: it takes a predicate's value as string_value or stringValue."""
        wanted = None
        if "filter" in query:
            predicates = json.loads(query["filter"][0])["predicates"]
            wanted = {p.get("string_value", p.get("stringValue")) for p in predicates if p["key"] == "display_name"}
        found = [self.get_run(r["run_id"]) for r in self.runs.values() if wanted is None or r["display_name"] in wanted]
        return {"runs": found, "total_size": len(found)} if found else {}

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
        if path == f"{PREFIX}/runs":
            return 200, self.create_run(body) if method == "POST" else self.list_runs(query)
        if method == "GET" and path.startswith(f"{PREFIX}/runs/"):
            run = self.get_run(path.rsplit("/", 1)[1])
            return (200, run) if run else (404, {"error": "run not found", "code": 5})
        return 404, {"error": f"{method} {path} is not served here", "code": 12}

"""The nightly reacts to data: a real Airflow (api-server, scheduler, dag-processor, as `make airflow` starts them, on
127.0.0.1 in a temporary home) with ``PARATHINK_NIGHTLY_DATA`` set. Publishing a snapshot (an asset event through
the REST API, as a producer would) starts an asset-triggered night that trains; a second event with nothing new
(same data, same code, same form) starts a night that trains nothing and says so in its log.

The night runs the teacher stage only on the tiny base (``PARATHINK_NIGHTLY_STAGES``, the deployment's setting), so
the test takes minutes; the latency from the event to the first task is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from dag_helpers import AIRFLOW_PY, CHEAP, PARATHINK, TOOLS
from servers import free_port

LOCAL_AIRFLOW = TOOLS / "local_airflow.py"
DAG = "parathink_nightly"
RUN_TIMEOUT_S = 900  # a deadline so that a stuck run fails the test instead of hanging it; not a timing check


class Server:
    def __init__(self, home: Path, port: int):
        self.url = f"http://127.0.0.1:{port}"
        self.password = json.loads((home / "passwords.json").read_text())["admin"]

    def api(self, method: str, path: str, headers: dict | None = None, **kw) -> httpx.Response:
        token = httpx.post(f"{self.url}/auth/token", json={"username": "admin", "password": self.password},
                           timeout=30).json()["access_token"]
        return httpx.request(method, f"{self.url}/api/v2{path}", timeout=60,
                             headers={"Authorization": f"Bearer {token}", **(headers or {})}, **kw)

    def runs(self) -> list[dict]:
        return self.api("GET", f"/dags/{DAG}/dagRuns", params={"order_by": "run_after"}).json()["dag_runs"]

    def settle(self) -> None:
        """Any run already started (none expected: the cron's next night is years away) ends before the test publishes."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while any(r["state"] in ("queued", "running") for r in self.runs()):
            assert time.monotonic() < deadline, "the scheduled night never ended"
            time.sleep(2)

    def next_run(self, known: set[str]) -> dict:
        """The first asset-triggered run not in ``known``."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            fresh = [r for r in self.runs() if r["dag_run_id"] not in known and r["run_type"] == "asset_triggered"]
            if fresh:
                return fresh[0]
            assert time.monotonic() < deadline, "no run started after the asset event"
            time.sleep(0.5)

    def finished(self, run_id: str) -> tuple[dict, dict]:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            run = self.api("GET", f"/dags/{DAG}/dagRuns/{run_id}").json()
            if run["state"] in ("success", "failed") or time.monotonic() > deadline:
                tis = self.api("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
                return run, {t["task_id"]: t for t in tis}
            time.sleep(2)

    def log(self, run_id: str, task_id: str) -> str:
        r = self.api("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
                     params={"full_content": "true"}, headers={"Accept": "application/json"})
        return json.dumps(r.json().get("content"))


@pytest.fixture(scope="module")
def airflow(airflow_python, tmp_path_factory):
    home, workdir = tmp_path_factory.mktemp("airflow-nightly"), tmp_path_factory.mktemp("nightly-work")
    data = workdir / "data"
    data.mkdir()
    port, mlflow_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    # The code a night runs is the image's digest here, as in a deployment: the shared checkout's commits and edits by
    # others during the test are no change of this night's code. The cron is the 29th of February: unpausing starts
    # no scheduled night (the first after the DAG's start date is in 2028), so every run here is the test's.
    env.update(PATH=f"{PARATHINK.parent}{os.pathsep}{env['PATH']}", CI="true", PARATHINK_NIGHTLY_DATA=str(data),
               PARATHINK_IMAGE_DIGEST="sha256:test", PARATHINK_NIGHTLY_CRON="0 2 29 2 *",
               PARATHINK_NIGHTLY_STAGES="teacher", PARATHINK_NIGHTLY_PROMOTE="false",
               PARATHINK_NIGHTLY_OVERRIDES="\n".join(CHEAP))
    start = [str(AIRFLOW_PY), str(LOCAL_AIRFLOW), "start", "--home", str(home), "--port", str(port),
             "--mlflow-port", str(mlflow_port), "--mlflow-bin", str(PARATHINK.with_name("mlflow")),
             "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}", "--workdir", str(workdir)]
    try:
        proc = subprocess.run(start, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        server = Server(home, port)
        server.data = data
        deadline = time.monotonic() + 300
        while server.api("GET", f"/dags/{DAG}").status_code != 200:
            assert time.monotonic() < deadline, "the dag-processor never parsed the DAG folder"
            time.sleep(2)
        assert server.api("GET", "/importErrors").json()["total_entries"] == 0
        assert server.api("PATCH", f"/dags/{DAG}", json={"is_paused": False}).status_code == 200
        yield server
    finally:
        subprocess.run([str(AIRFLOW_PY), str(LOCAL_AIRFLOW), "stop", "--home", str(home)], env=env, timeout=120)


def _publish(server: Server) -> tuple[set[str], datetime]:
    """Mark the data asset updated, as a producer does after writing a snapshot; (runs before, the event's time)."""
    known = {r["dag_run_id"] for r in server.runs()}
    assets = server.api("GET", "/assets", params={"name_pattern": "parathink_nightly_data"}).json()["assets"]
    assert len(assets) == 1 and assets[0]["uri"] == server.data.as_uri(), assets
    event = server.api("POST", "/assets/events", json={"asset_id": assets[0]["id"]})
    assert event.status_code == 200, event.text
    return known, datetime.fromisoformat(event.json()["timestamp"])


@pytest.mark.slow
@pytest.mark.timeout(2400)  # Airflow's start and one night of stage tasks on a shared 2-core machine
def test_a_new_snapshot_starts_a_night_that_trains_and_an_unchanged_one_trains_nothing(airflow):
    airflow.settle()
    (airflow.data / "snapshot-1.jsonl").write_text('{"problem": "1 + 1", "answer": "2"}\n')
    known, at = _publish(airflow)
    run = airflow.next_run(known)
    assert run["run_type"] == "asset_triggered"
    run, tis = airflow.finished(run["dag_run_id"])
    first = datetime.fromisoformat(tis["what_changed"]["start_date"])
    print(f"\nasset event -> first task started: {(first - at).total_seconds():.1f} s")
    assert run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    assert tis["teacher"]["state"] == "success" and tis["record_inputs"]["state"] == "success"
    log = airflow.log(run["dag_run_id"], "what_changed")
    assert "changed since the last night that trained (none): data, code, form" in log
    assert "a new data snapshot (asset event)" in log

    known, at = _publish(airflow)  # nothing new: same files, same code, same form
    run, tis = airflow.finished(airflow.next_run(known)["dag_run_id"])
    assert run["state"] == "success"
    assert tis["what_changed"]["state"] == "success" and tis["plan"]["state"] == "skipped"
    assert tis["teacher"]["state"] == "skipped" and tis["record_inputs"]["state"] == "skipped"
    assert "no new data and no code change since" in airflow.log(run["dag_run_id"], "what_changed")

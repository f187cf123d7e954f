"""A real Airflow (api-server, scheduler, dag-processor) and MLflow UI, started as `make airflow` starts them, on
127.0.0.1 with free ports and a temporary AIRFLOW_HOME: the curriculum triggered through the REST API as the UI's
Trigger button does, then through the UI itself in headless Chromium; and the nightly DAG reacting to data.

One Airflow serves every test of this file (its start is a minute or more of a 2-core CI machine); the nightly's
deployment settings are in its environment from the start (they are read when the DAG folder is parsed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import local_airflow  # tools/: dag_helpers (conftest.py) puts it on sys.path
import pytest
from dag_helpers import AIRFLOW_PY, CHEAP, PARATHINK, TOOLS, require
from servers import free_port

LOCAL_AIRFLOW = TOOLS / "local_airflow.py"
DAG = "parathink_curriculum"
RUN_TIMEOUT_S = 900  # a deadline so that a stuck run fails the test instead of hanging it; not a timing check
SCREENSHOTS = Path(os.environ.get("PARATHINK_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="airflow-ui-"))


class Airflow:
    def __init__(self, home: Path, port: int, mlflow_port: int, workdir: Path):
        self.home, self.url, self.workdir = home, f"http://127.0.0.1:{port}", workdir
        self.mlflow = f"http://127.0.0.1:{mlflow_port}"
        self.password = json.loads((home / "passwords.json").read_text())["admin"]
        self.shared_run_dir = workdir / "runs" / "shared"

    def headers(self) -> dict[str, str]:
        r = httpx.post(f"{self.url}/auth/token", json={"username": "admin", "password": self.password}, timeout=30)
        assert r.status_code in (200, 201), r.text
        return {"Authorization": f"Bearer {r.json()['access_token']}"}

    def api(self, method: str, path: str, headers: dict | None = None, **kw) -> httpx.Response:
        return httpx.request(method, f"{self.url}/api/v2{path}", headers={**self.headers(), **(headers or {})},
                             timeout=60, **kw)

    def wait_for(self, run_id: str, dag: str = DAG) -> dict:
        """The finished run (success or failed), with its task states (``tasks``) and task instances
        (``task_instances``, by task id)."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            run = self.api("GET", f"/dags/{dag}/dagRuns/{run_id}").json()
            if run["state"] in ("success", "failed") or time.monotonic() > deadline:
                tis = self.api("GET", f"/dags/{dag}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
                run["tasks"] = {t["task_id"]: t["state"] for t in tis}
                run["task_instances"] = {t["task_id"]: t for t in tis}
                return run
            time.sleep(2)


@pytest.fixture(scope="module")
def airflow(airflow_python, tmp_path_factory):
    """`make airflow`'s own start command, on free ports in a temporary home; stopped at the end."""
    home, workdir = tmp_path_factory.mktemp("airflow-server"), tmp_path_factory.mktemp("airflow-work")
    port, mlflow_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["PATH"] = f"{PARATHINK.parent}{os.pathsep}{env['PATH']}"  # as make airflow: the project's parathink first
    env.update(nightly_settings(workdir / "data"))
    start = [str(AIRFLOW_PY), str(LOCAL_AIRFLOW), "start", "--home", str(home), "--port", str(port),
             "--mlflow-port", str(mlflow_port), "--mlflow-bin", str(PARATHINK.with_name("mlflow")),
             "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}", "--workdir", str(workdir)]
    try:
        started = time.monotonic()
        proc = subprocess.run(start, env={**env, "CI": "true"}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"Airflow  http://127.0.0.1:{port}" in proc.stdout and f"MLflow   http://127.0.0.1:{mlflow_port}" in proc.stdout
        server = Airflow(home, port, mlflow_port, workdir)
        _wait_for_dag(server)
        print(f"\nAirflow + MLflow UI up in {time.monotonic() - started:.0f} s")
        yield server
    finally:
        subprocess.run([str(AIRFLOW_PY), str(LOCAL_AIRFLOW), "stop", "--home", str(home)], env=env, timeout=120)


def nightly_settings(data: Path) -> dict[str, str]:
    """The nightly's deployment settings (docs/lifecycle.md), for a test: the data folder it watches, and nights
    that run the teacher stage only on the tiny base, so that a night takes a minute. The code a night runs is the
    image's digest here, as in a deployment: the shared checkout's commits and edits by others during the test are no
    change of this night's code. The cron is the 29th of February: unpausing starts no scheduled night (the first
    after the DAG's start date is in 2028), so every nightly run here is the test's."""
    data.mkdir(parents=True, exist_ok=True)
    return {"PARATHINK_NIGHTLY_DATA": str(data), "PARATHINK_IMAGE_DIGEST": "sha256:test",
            "PARATHINK_NIGHTLY_CRON": "0 2 29 2 *", "PARATHINK_NIGHTLY_STAGES": "teacher",
            "PARATHINK_NIGHTLY_PROMOTE": "false", "PARATHINK_NIGHTLY_OVERRIDES": "\n".join(CHEAP)}


def _wait_for_dag(server: Airflow, dag: str = DAG) -> None:
    deadline = time.monotonic() + 300
    while server.api("GET", f"/dags/{dag}").status_code != 200:
        assert time.monotonic() < deadline, "the dag-processor never parsed the DAG folder"
        time.sleep(2)
    assert server.api("GET", "/importErrors").json()["total_entries"] == 0


def _conf(run_dir: Path) -> dict:
    return {"stages": ["teacher", "filter"], "run_dir": str(run_dir), "overrides": CHEAP}


@pytest.mark.slow
def test_every_process_listens_on_loopback_only(airflow):
    pids = json.loads((airflow.home / "pids.json").read_text())
    assert set(pids) == {"api-server", "scheduler", "dag-processor", "mlflow"}
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout if shutil.which("ss") else ""
    groups = {str(p) for p in pids.values()}
    mine = [line for line in out.splitlines()
            if any(f"pid={pid}," in line for pid in _group_members(groups))]
    require(bool(out), "no `ss` command to list listening sockets")
    assert mine and all(line.split()[3].startswith("127.0.0.1:") for line in mine), mine


def _group_members(pgids: set[str]) -> set[str]:
    members = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[2] in pgids:  # field 5 of /proc/PID/stat: the process group
            members.add(stat.parent.name)
    return members


@pytest.mark.slow
def test_rest_trigger_runs_teacher_then_filter_into_the_mlflow_store_of_the_ui(airflow):
    headers = airflow.headers()
    assert httpx.get(f"{airflow.url}/api/v2/dags/{DAG}").status_code == 401  # nothing without a token
    started = time.monotonic()
    r = httpx.post(f"{airflow.url}/api/v2/dags/{DAG}/dagRuns", headers=headers, timeout=60,
                   json={"logical_date": None, "conf": _conf(airflow.shared_run_dir)})
    assert r.status_code == 200, r.text
    run = airflow.wait_for(r.json()["dag_run_id"])
    print(f"\nREST trigger -> finished teacher,filter run: {time.monotonic() - started:.0f} s")
    assert run["state"] == "success", run
    assert (run["tasks"]["teacher"], run["tasks"]["filter"], run["tasks"]["promote"]) == (
        "success", "success", "skipped")
    for stage, output in [("teacher", "raw.jsonl"), ("filter", "accepted.jsonl")]:
        assert (airflow.shared_run_dir / stage / output).stat().st_size > 0
        manifest = json.loads((airflow.shared_run_dir / stage / "_manifest.json").read_text())
        assert manifest["stage"] == stage and manifest["mlflow_run_id"]
    # The stages tracked into the store the MLflow UI serves, in an experiment marked as model training.
    found = httpx.post(f"{airflow.mlflow}/api/2.0/mlflow/runs/search", timeout=60, json={
        "experiment_ids": [_experiment(airflow)["experiment_id"]], "max_results": 50}).json()["runs"]
    names = {r["info"]["run_name"] for r in found}
    assert {"teacher", "filter"} <= names, names
    # The parent's name tells it apart: experiment, date, seed, then the Airflow run id when the task's context
    # reached the stage process, else the run directory's last two folders (parathink.tracking.lineage.run_name).
    assert any(n.startswith("tiny ") and n.endswith((r.json()["dag_run_id"], "runs/shared")) for n in names), names
    assert local_airflow.mlflow_link(airflow.mlflow) == (
        f"{airflow.mlflow}/#/experiments/{_experiment(airflow)['experiment_id']}/runs?workflowType=machine_learning")


def _experiment(airflow: Airflow) -> dict:
    r = httpx.get(f"{airflow.mlflow}/api/2.0/mlflow/experiments/get-by-name",
                  params={"experiment_name": "parathink-tiny"}, timeout=60)
    assert r.status_code == 200, r.text
    experiment = r.json()["experiment"]
    assert {"key": "mlflow.experimentKind", "value": "custom_model_development"} in experiment["tags"]
    return experiment


# ---------------------------------------------------------------- the UI in headless Chromium

FORM_TITLES = ["Experiment", "Stages", "Run directory", "Seed", "Overrides", "Executor", "Promote"]


@pytest.fixture
def browser(tmp_path):
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    require(bool(chromium and driver), "no chromium/chromedriver: run `make chromium` as root "
                                       "(Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # The machine's network is closed: no background fetches, no component updates, no sync, a fresh profile.
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1500"):
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver), options=options)  # the system driver: selenium downloads nothing
    drv.implicitly_wait(30)
    try:
        yield drv
    finally:
        drv.quit()


def _type(element, text: str) -> None:
    """Type into a React-controlled field; on a busy machine keystrokes can be lost, so check and retype slowly."""
    element.send_keys(text)
    if element.get_attribute("value") == text:
        return
    element.clear()
    for char in text:
        element.send_keys(char)
        time.sleep(0.02)
    assert element.get_attribute("value") == text


def _pick(drv, field: str, values: list[str]) -> None:
    """A multi-select: type each value into its search box and press Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    search = drv.find_element(By.XPATH, f"//input[@name='element_{field}']/preceding::input[1]")
    search.click()
    for value in values:
        _type(search, value)
        search.send_keys(Keys.ENTER)
    picked = [e.get_attribute("value") for e in drv.find_elements(By.CSS_SELECTOR, f"input[name=element_{field}]")]
    assert picked == values


@pytest.mark.slow
def test_the_ui_trigger_form_explains_itself_and_runs_the_curriculum(airflow, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(airflow.url)
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(airflow.password)
    browser.find_element(By.XPATH, "//button[@type='submit']").click()
    browser.find_element(By.XPATH, "//*[normalize-space()='Dags']")  # logged in
    browser.get(f"{airflow.url}/dags/{DAG}")
    browser.find_element(By.XPATH, "//button[normalize-space()='Trigger']").click()
    form = browser.find_element(By.XPATH, "//*[@role='dialog'][.//*[normalize-space()='Run Parameters']]")
    WebDriverWait(browser, 30).until(lambda _: "Promote" in form.text)  # the dialog opens with an animation
    text = form.text
    for title in FORM_TITLES:
        assert f"\n{title}" in text, title
    assert "A file of hydra_conf/experiment/" in text and "one key=value per line" in text

    _pick(browser, "stages", ["teacher", "filter"])
    # Relative to where the DAG runs parathink: the REST test's run directory, so its stages are up to date.
    _type(browser.find_element(By.NAME, "element_run_dir"), "runs/shared")
    _type(browser.find_element(By.NAME, "element_overrides"), "\n".join(CHEAP))
    browser.save_screenshot(str(SCREENSHOTS / "airflow-trigger-form.png"))
    before = {r["dag_run_id"] for r in airflow.api("GET", f"/dags/{DAG}/dagRuns").json()["dag_runs"]}
    form.find_element(By.XPATH, ".//button[normalize-space()='Trigger']").click()

    run_id = _new_run(airflow, before)
    run = airflow.wait_for(run_id)
    expected = {**_conf(airflow.shared_run_dir), "run_dir": "runs/shared"}  # what was typed, character for character
    assert {key: run["conf"][key] for key in expected} == expected
    assert run["triggered_by"] == "ui" and run["state"] == "success", run
    browser.get(f"{airflow.url}/dags/{DAG}/runs/{run_id}")
    browser.find_element(By.XPATH, "//*[normalize-space()='teacher']")
    browser.save_screenshot(str(SCREENSHOTS / "airflow-run.png"))
    # Back in MLflow: the link `make airflow` prints opens the runs (model training), not the GenAI view.
    browser.get(local_airflow.mlflow_link(airflow.mlflow))
    # The curriculum's parent run, by the name parathink.tracking.lineage.run_name gives it ("tiny <date> seed 0 …").
    browser.find_element(By.XPATH, "//*[starts-with(normalize-space(), 'tiny 20') and contains(., ' seed 0 ')]")
    assert "Traces" not in browser.find_element(By.TAG_NAME, "main").text
    browser.save_screenshot(str(SCREENSHOTS / "mlflow-runs.png"))
    print(f"\nscreenshots: {SCREENSHOTS}")


def _new_run(airflow: Airflow, before: set[str]) -> str:
    deadline = time.monotonic() + 60
    while True:
        runs = airflow.api("GET", f"/dags/{DAG}/dagRuns").json()["dag_runs"]
        new = [r["dag_run_id"] for r in runs if r["dag_run_id"] not in before]
        if new:
            return new[0]
        assert time.monotonic() < deadline, "pressing Trigger created no DAG run"
        time.sleep(1)


# ---------------------------------------------------------------- the nightly reacts to data
# Publishing a snapshot (an asset event through the REST API, as a producer would) starts an asset-triggered night
# that trains; a second event with nothing new (same data, same code, same form) starts a night that trains nothing
# and says so in its log. The latency from the event to the first task is printed, never asserted.

NIGHTLY = "parathink_nightly"


def _nightly_runs(airflow: Airflow) -> list[dict]:
    return airflow.api("GET", f"/dags/{NIGHTLY}/dagRuns", params={"order_by": "run_after"}).json()["dag_runs"]


def _publish(airflow: Airflow) -> tuple[set[str], datetime]:
    """Mark the data asset updated, as a producer does after writing a snapshot; (runs before, the event's time)."""
    known = {r["dag_run_id"] for r in _nightly_runs(airflow)}
    assets = airflow.api("GET", "/assets", params={"name_pattern": "parathink_nightly_data"}).json()["assets"]
    assert len(assets) == 1 and assets[0]["uri"] == (airflow.workdir / "data").as_uri(), assets
    event = airflow.api("POST", "/assets/events", json={"asset_id": assets[0]["id"]})
    assert event.status_code == 200, event.text
    return known, datetime.fromisoformat(event.json()["timestamp"])


def _next_night(airflow: Airflow, known: set[str]) -> dict:
    """The first asset-triggered run not in ``known``."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        fresh = [r for r in _nightly_runs(airflow) if r["dag_run_id"] not in known and r["run_type"] == "asset_triggered"]
        if fresh:
            return fresh[0]
        assert time.monotonic() < deadline, "no run started after the asset event"
        time.sleep(0.5)


def _night_log(airflow: Airflow, run_id: str, task_id: str) -> str:
    r = airflow.api("GET", f"/dags/{NIGHTLY}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
                    params={"full_content": "true"}, headers={"Accept": "application/json"})
    return json.dumps(r.json().get("content"))


@pytest.mark.slow
@pytest.mark.timeout(2400)  # one night of stage tasks on a shared 2-core machine
def test_a_new_snapshot_starts_a_night_that_trains_and_an_unchanged_one_trains_nothing(airflow):
    _wait_for_dag(airflow, NIGHTLY)
    assert airflow.api("PATCH", f"/dags/{NIGHTLY}", json={"is_paused": False}).status_code == 200
    (airflow.workdir / "data" / "snapshot-1.jsonl").write_text('{"problem": "1 + 1", "answer": "2"}\n')
    known, at = _publish(airflow)
    run = _next_night(airflow, known)
    assert run["run_type"] == "asset_triggered"
    run = airflow.wait_for(run["dag_run_id"], NIGHTLY)
    tis = run["task_instances"]
    first = datetime.fromisoformat(tis["what_changed"]["start_date"])
    print(f"\nasset event -> first task started: {(first - at).total_seconds():.1f} s")
    assert run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    assert tis["teacher"]["state"] == "success" and tis["record_inputs"]["state"] == "success"
    log = _night_log(airflow, run["dag_run_id"], "what_changed")
    assert "changed since the last night that trained (none): data, code, form" in log
    assert "a new data snapshot (asset event)" in log

    known, at = _publish(airflow)  # nothing new: same files, same code, same form
    run = airflow.wait_for(_next_night(airflow, known)["dag_run_id"], NIGHTLY)
    tis = run["task_instances"]
    assert run["state"] == "success"
    assert tis["what_changed"]["state"] == "success" and tis["plan"]["state"] == "skipped"
    assert tis["teacher"]["state"] == "skipped" and tis["record_inputs"]["state"] == "skipped"
    assert "no new data and no code change since" in _night_log(airflow, run["dag_run_id"], "what_changed")

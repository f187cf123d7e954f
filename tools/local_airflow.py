"""A local Airflow for ``make airflow`` and for the tests: api-server, scheduler and dag-processor on 127.0.0.1.

    python tools/local_airflow.py start --home .airflow --port 8080 [--mlflow-port 5000 ...]
    python tools/local_airflow.py stop --home .airflow

Not ``airflow standalone``: its scheduler and triggerer open a log server on every interface (``[::]:8793``) with
no host setting. Here the scheduler runs with ``--skip-serve-logs`` (with LocalExecutor the api-server reads task
logs from this machine's files), the metadata database is sqlite in ``AIRFLOW_HOME``, and the JWT secret, the
API secret key and the admin's password are generated once per home (the home ignores itself in git). Run with
the Airflow venv's python (it finds ``airflow`` beside it) or pass ``--airflow-bin``; this module imports no
Airflow, so the tests import it from their own venv. A developer's tool: it lives outside ``dags/``, which ships
into the scheduler's DAG folder.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DAGS_FOLDER = Path(__file__).resolve().parents[1] / "dags"
PARALLELISM = 2  # LocalExecutor workers; Airflow's default 32 starts 32 processes (~4 GB) on a 2-core machine
USER = "admin"
START_TIMEOUT_S = 300  # the api-server needs ~25 s on an idle 2-core machine, much longer on a busy one
STOP_GRACE_S = 30


@dataclass(frozen=True)
class Home:
    """An AIRFLOW_HOME and the files this module keeps in it."""

    path: Path

    @property
    def pids(self) -> Path:
        return self.path / "pids.json"

    @property
    def passwords(self) -> Path:
        return self.path / "passwords.json"

    def log(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    def secret(self, name: str) -> str:
        """A random secret generated on first use and kept in the home (mode 600)."""
        path = self.path / f".{name}"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def prepare(self) -> None:
        (self.path / "logs").mkdir(parents=True, exist_ok=True)
        (self.path / ".gitignore").write_text("*\n")  # inside the checkout, never committed
        if not self.passwords.exists():
            self.passwords.write_text(json.dumps({USER: secrets.token_urlsafe(12)}))
            self.passwords.chmod(0o600)

    def password(self) -> str:
        return json.loads(self.passwords.read_text())[USER]


def environment(home: Home, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The Airflow processes' environment: this home, dags/, LocalExecutor, everything on 127.0.0.1."""
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home.path),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": home.secret("api_secret_key"),
        "AIRFLOW__API_AUTH__JWT_SECRET": home.secret("jwt_secret"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home.passwords),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",  # it would open another port
    })
    env.update(extra or {})
    return env


def airflow_command(airflow_bin: str | Path, *args: str) -> list[str]:
    return [str(airflow_bin), *args]


def migrate(airflow_bin: str | Path, env: dict[str, str]) -> None:
    subprocess.run(airflow_command(airflow_bin, "db", "migrate"), env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True)


def create_pool(airflow_bin: str | Path, env: dict[str, str]) -> str | None:
    """The pool of GPU stage tasks (pools.py), sized from the environment; a task of a missing pool never runs."""
    if __package__ in (None, ""):  # run as a script: make the package importable
        sys.path.insert(0, str(DAGS_FOLDER))
    from parathink_airflow.pools import pool_name, pool_slots

    name = pool_name(env)
    if name:
        subprocess.run(airflow_command(airflow_bin, "pools", "set", name, str(pool_slots(env)),
                                       "parathink's GPU stages: one slot per node of the GPU pool"),
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return name


def processes(airflow_bin: str | Path, port: int) -> dict[str, list[str]]:
    return {
        "api-server": airflow_command(airflow_bin, "api-server", "-H", "127.0.0.1", "-p", str(port)),
        "scheduler": airflow_command(airflow_bin, "scheduler", "--skip-serve-logs"),
        "dag-processor": airflow_command(airflow_bin, "dag-processor"),
    }


def launch(home: Home, commands: dict[str, list[str]], env: dict[str, str]) -> dict[str, int]:
    """Start each command in its own session (so that stop() ends its children too); returns their pids."""
    pids = json.loads(home.pids.read_text()) if home.pids.exists() else {}
    for name, cmd in commands.items():
        with open(home.log(name), "ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        pids[name] = proc.pid
    home.pids.write_text(json.dumps(pids))
    return pids


def wait_healthy(url: str, what: str, home: Home, names: list[str], timeout_s: float = START_TIMEOUT_S) -> None:
    """Until ``url`` answers 200; raises with the logs' tails when a process died or time ran out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        dead = [n for n in names if not _alive(json.loads(home.pids.read_text()).get(n))]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"no answer from {url} in {timeout_s:.0f} s"
            tails = "\n".join(f"--- {n}\n{home.log(n).read_text(errors='replace')[-2000:]}" for n in names)
            raise RuntimeError(f"{what} did not start ({why}):\n{tails}")
        time.sleep(1)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def stop(home: Home) -> list[str]:
    """SIGTERM to each started process group, SIGKILL after a grace period; returns what was stopped."""
    if not home.pids.exists():
        return []
    pids = json.loads(home.pids.read_text())
    for pid in pids.values():
        if _alive(pid):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in pids.values():
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    home.pids.unlink()
    return list(pids)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _start(args: argparse.Namespace) -> int:
    home = Home(Path(args.home).resolve())
    home.prepare()
    if home.pids.exists() and all(_alive(p) for p in json.loads(home.pids.read_text()).values()):
        print("already running (make airflow-stop first to restart)")
        _print_urls(args, home)
        return 0
    stop(home)  # leftovers of a half-dead start
    for port in (args.port, args.mlflow_port):
        if not port_free(port):
            print(f"local_airflow: error: port {port} on 127.0.0.1 is in use (AIRFLOW_PORT= / MLFLOW_UI_PORT=)",
                  file=sys.stderr)
            return 2
    # This machine's own Airflow: its operator (you) lets the form pick the teacher's built-in tiny model, which the
    # cheap run of docs/airflow.md uses; anything beyond that is yours to add (PARATHINK_FORM_ALLOW=... make airflow).
    allow = ",".join(g for g in ("teacher.self.model", os.environ.get("PARATHINK_FORM_ALLOW")) if g)
    extra = {"PARATHINK_WORKDIR": args.workdir, "PARATHINK_TRACKING_URI": args.tracking_uri,
             "PARATHINK_FORM_ALLOW": allow}
    env = environment(home, args.port, extra)
    print("airflow db migrate ...", flush=True)
    migrate(args.airflow_bin, env)
    create_pool(args.airflow_bin, env)
    commands = processes(args.airflow_bin, args.port)
    commands["mlflow"] = [args.mlflow_bin, "server", "--host", "127.0.0.1", "--port", str(args.mlflow_port),
                          "--workers", "1", "--backend-store-uri", args.tracking_uri]
    # MLflow's background job runner is for its GenAI features; the curriculum does not use it.
    launch(home, commands, {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    try:
        wait_healthy(f"http://127.0.0.1:{args.port}/api/v2/monitor/health", "Airflow", home, list(commands))
        wait_healthy(f"http://127.0.0.1:{args.mlflow_port}/health", "MLflow", home, list(commands))
    except RuntimeError as err:
        stop(home)
        print(f"local_airflow: error: {err}", file=sys.stderr)
        return 1
    _print_urls(args, home)
    return 0


def _print_urls(args: argparse.Namespace, home: Home) -> None:
    print(f"\nAirflow  http://127.0.0.1:{args.port}   user {USER}, password {home.password()} "
          f"(kept in {home.passwords})")
    print("         DAGs: parathink_curriculum (Trigger opens the form), parathink_nightly (paused until you "
          "switch it on)")
    link = mlflow_link(f"http://127.0.0.1:{args.mlflow_port}")
    print(f"MLflow   {link}")
    print(f"         the DAG runs' store: {args.tracking_uri}"
          + ("" if "/runs?" in link else "; MLflow opens in its GenAI view until you pick 'Model training'"))
    print(f"Logs     {home.path / 'logs'}    stop: make airflow-stop")


def mlflow_link(base: str, experiment: str = "parathink-tiny") -> str:
    """The experiment's runs in MLflow's model-training view, once a run has created the experiment.

    MLflow 3.17's UI opens every experiment in its GenAI view unless the URL (or the browser's remembered switch)
    says ``workflowType=machine_learning``; the experiment's ``mlflow.experimentKind`` tag does not decide it.
    """
    query = urllib.parse.urlencode({"experiment_name": experiment})
    try:
        with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}", timeout=10) as r:
            experiment_id = json.load(r)["experiment"]["experiment_id"]
    except (urllib.error.URLError, OSError, KeyError, ValueError):
        return f"{base}/#/experiments?workflowType=machine_learning"
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="local_airflow.py", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--home", required=True, help="AIRFLOW_HOME")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--mlflow-port", type=int, default=5000)
    p.add_argument("--mlflow-bin", default="mlflow")
    p.add_argument("--airflow-bin", default=str(Path(sys.executable).with_name("airflow")))
    p.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    p.add_argument("--workdir", default=str(DAGS_FOLDER.parent), help="where the DAG runs `parathink`")
    args = p.parse_args(argv)
    if args.action == "stop":
        stopped = stop(Home(Path(args.home).resolve()))
        print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
        return 0
    return _start(args)


if __name__ == "__main__":
    sys.exit(main())

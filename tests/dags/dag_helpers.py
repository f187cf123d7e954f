"""Helpers for the Airflow DAG tests (the fixtures are in conftest.py).

Airflow lives in its own venv (``make airflow-venv``: .venv-airflow), never in this one: what needs Airflow runs
in a subprocess of that venv's python (``in_airflow.py``, ``tools/local_airflow.py``, ``tools/stage_pod.py``), and
the tests here assert on what it prints and on the run directories it leaves. The DAGs' pure modules (``chain``,
``form``, ``local``) and ``tools/local_airflow.py`` import no Airflow and are imported directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
TOOLS = ROOT / "tools"  # make airflow's launcher and the stage-pod command line (not shipped with the DAGs)
AIRFLOW_PY = ROOT / ".venv-airflow" / "bin" / "python"
PARATHINK = Path(sys.executable).with_name("parathink")
IN_AIRFLOW = Path(__file__).with_name("in_airflow.py")
# teacher + filter of the tiny experiment in seconds: 80 problems instead of 3,600, no MLflow.
CHEAP = ["teacher.self.model=builtin:tiny_base", "data.cold_start.0.n=40", "data.cold_start.1.n=40"]

sys.path.insert(0, str(DAGS))
sys.path.insert(0, str(TOOLS))


def require(ok: bool, why: str) -> None:
    """Skip with the reason on a developer's machine; under CI a missing dependency is a failure."""
    if ok:
        return
    if os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(f"{why} (CI must run this test)")
    pytest.skip(why)


def airflow_env(home: Path, workdir: Path, **extra: str) -> dict[str, str]:
    """What a dag.test() or DagBag process needs: its home, dags/, and the project's parathink."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(DAGS), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               PARATHINK_BIN=str(PARATHINK), PARATHINK_WORKDIR=str(workdir), CI="true", **extra)
    return env


def in_airflow(env: dict[str, str], *args: str, timeout: float = 900):
    """Run ``in_airflow.py ARGS`` in the Airflow venv; returns (its JSON result, its whole output)."""
    proc = subprocess.run([str(AIRFLOW_PY), "-W", "ignore", str(IN_AIRFLOW), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@@result")]
    assert proc.returncode == 0 and lines, f"in_airflow.py {' '.join(args)} failed:\n{out[-6000:]}"
    return json.loads(lines[-1][len("@@result"):]), out


def dag_test(home: Path, workdir: Path, confs: list, **env: str):
    """dag.test() of each conf in order, in one Airflow process; returns (results, the runs' logs).

    A conf is the curriculum DAG's, or a ``(dag_id, conf)`` pair for another DAG.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    runs = [{"dag_id": c[0], "conf": c[1]} if isinstance(c, tuple) else {"dag_id": "parathink_curriculum", "conf": c}
            for c in confs]
    runs_file = workdir / f"runs-{len(list(workdir.glob('runs-*')))}.json"
    runs_file.write_text(json.dumps(runs))
    return in_airflow(airflow_env(home, workdir, **env), "dag-test", str(runs_file))


def states(result: dict) -> dict[str, str]:
    return {task: ti["state"] for task, ti in result["tasks"].items()}

"""Fixtures for the Airflow DAG tests; dag_helpers.py says how Airflow is reached from this venv."""

from __future__ import annotations

from pathlib import Path

import pytest
from dag_helpers import AIRFLOW_PY, airflow_env, require


@pytest.fixture(scope="session")
def airflow_python() -> Path:
    require(AIRFLOW_PY.exists(), "no Airflow venv: run `make airflow-venv`")
    return AIRFLOW_PY


@pytest.fixture(scope="session")
def airflow_home(airflow_python, tmp_path_factory) -> Path:
    """One migrated metadata database for the session's dag.test() runs (migrating costs ~20 s)."""
    import local_airflow  # tools/ (dag_helpers puts it on the path)

    home = tmp_path_factory.mktemp("airflow-home")
    local_airflow.migrate(airflow_python.with_name("airflow"), airflow_env(home, home))
    return home

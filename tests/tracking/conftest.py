"""Tracking tests drive the runner with the plug-in test stages (tests/conftest.py), tracked in MLflow."""

import pytest
from servers import sqlite_store


@pytest.fixture
def curriculum(make_curriculum, tmp_path):
    """prep -> train -> tune -> eval (a stand-in writing results.json), tracked in a sqlite MLflow store."""
    c = make_curriculum(tracking="sqlite")
    c.sections["eval"] = {"steps": 1, "results": "[train,tune]"}
    c.uri = sqlite_store(tmp_path / "mlflow.db")
    return c

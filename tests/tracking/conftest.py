"""Tracking tests drive the runner with the plug-in test stages of tests/stages (see its conftest)."""

import importlib.util
from pathlib import Path

import pytest

from parathink.tracking.testing import sqlite_store

_spec = importlib.util.spec_from_file_location("runner_fixtures", Path(__file__).parents[1] / "stages" / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
STAGE_FILE = _fixtures.STAGE_FILE


@pytest.fixture
def curriculum(tmp_path, monkeypatch):
    """prep -> train -> tune -> eval (a stand-in writing results.json), tracked in a sqlite MLflow store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    c = _fixtures.Curriculum(tmp_path, tracking="sqlite")
    c.sections["eval"] = {"steps": 1, "results": "[train,tune]"}
    c.uri = sqlite_store(tmp_path / "mlflow.db")
    return c


"""A tracking store that can never work is bad input (exit 2), found before a run takes a lock (issue 48 item 5)."""

import pytest

from parathink.errors import BadInput
from parathink.tracking.reachable import ensure_reachable


@pytest.mark.parametrize("uri, message", [
    ("ftp://x", "not a store MLflow tracks to"),
    ("gopher://user:hunter2@x/y", "not a store MLflow tracks to"),
    ("sqlite:////proc/parathink-x.db", "the SQLite store cannot be created in /proc"),
    ("sqlite:///NOWHERE/x.db", "of the SQLite store does not exist"),
])
def test_a_store_that_cannot_work_is_one_line(tmp_path, uri, message):
    uri = uri.replace("NOWHERE", str(tmp_path / "nowhere")[1:])
    with pytest.raises(BadInput, match=message) as e:
        ensure_reachable(uri)
    assert "hunter2" not in str(e.value) and "\n" not in str(e.value)


def test_a_sqlite_store_that_can_be_created_passes_and_the_probe_leaves_nothing(tmp_path):
    ensure_reachable(f"sqlite:///{tmp_path}/mlflow.db")
    (tmp_path / "existing.db").write_bytes(b"")
    ensure_reachable(f"sqlite:///{tmp_path}/existing.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.db"]
    for uri in ("mlruns", f"file://{tmp_path}/mlruns", "postgresql+psycopg2://u@db/mlflow", "databricks"):
        ensure_reachable(uri)  # no network, no write: MLflow's own to reach

"""Test helpers: ready-made SQLite MLflow stores.

Creating an MLflow SQLite store runs its schema migrations (~10 s on a busy 2-core machine); tests that each
need a fresh store copy one store migrated once per process instead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

_template: Path | None = None


def sqlite_store(path: str | Path) -> str:
    """Create a fresh, migrated MLflow SQLite store at ``path``; returns its tracking URI."""
    global _template
    if _template is None or not _template.exists():
        from mlflow.tracking import MlflowClient

        _template = Path(tempfile.mkdtemp(prefix="parathink-mlflow-")) / "template.db"
        MlflowClient(tracking_uri=f"sqlite:///{_template}").search_experiments()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template, path)
    return f"sqlite:///{path}"

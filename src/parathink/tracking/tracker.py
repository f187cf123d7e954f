"""The one tracking interface every training loop and stage logs through.

Loops call ``tracker.log_metrics({...}, step=s)``; what sits underneath (MLflow, a JSONL file, nothing)
is chosen by the runner. Keeping the interface this small lets the SFT and RL loops run unchanged in a
unit test (``NullTracker``), a local run (``JsonlTracker``) and a curriculum run (MLflow).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tracker(Protocol):
    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...


class NullTracker:
    """Drops everything; for tests and library use."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass


class JsonlTracker:
    """Appends one JSON line per call to ``path``; used when no MLflow run is configured."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, record: dict) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._write({"time": time.time(), "params": dict(params)})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        self._write({"time": time.time(), "step": step, "metrics": clean})

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._write({"time": time.time(), "artifact": str(path), "artifact_path": artifact_path})

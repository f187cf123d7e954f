"""The runner's progress lines: ``[parathink] ...`` on stderr, what an Airflow or Kubeflow task log shows."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def log(msg: str) -> None:
    print(f"[parathink] {msg}", file=sys.stderr, flush=True)


def metrics_tail(metrics: Mapping[str, Any] | None) -> str:
    """``; key=value ...`` (sorted, numbers to 4 significant digits), or nothing: a stage's metrics at the end of its
    done line, so that a task log ends with them wherever the run directory lives."""
    if not metrics:
        return ""
    return "; " + " ".join(f"{k}={_short(v)}" for k, v in sorted(metrics.items()))


def _short(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}"

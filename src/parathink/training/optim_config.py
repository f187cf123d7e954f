"""The optimiser settings every training stage's config shares, read from YAML in one place (no torch)."""

from __future__ import annotations

from typing import Any


def with_betas(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with ``betas`` (a YAML list) as the (float, float) tuple AdamW takes, when it is set."""
    if "betas" in values:
        values["betas"] = tuple(float(b) for b in values["betas"])
    return values

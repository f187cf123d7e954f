"""Fixtures for the Kubeflow Pipelines tests."""

from __future__ import annotations

import pytest
from kfp_helpers import Compiled


@pytest.fixture(scope="session")
def compile_pipeline(tmp_path_factory):
    """compile_pipeline(*overrides) -> Compiled, through `parathink kfp compile` (in this process: it is cheap)."""
    from parathink.cli import main

    cache: dict[tuple, Compiled] = {}

    def go(*overrides: str) -> Compiled:
        if overrides not in cache:
            out = tmp_path_factory.mktemp("kfp") / "pipeline.yaml"
            assert main(["kfp", "compile", *overrides, "--output", str(out)]) == 0
            cache[overrides] = Compiled(out)
        return cache[overrides]

    return go

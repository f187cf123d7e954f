"""The component body: `parathink stage NAME` in a subprocess, retried on exit code 1 only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kfp_helpers import ROOT

from parathink.kfp.components import STAGES, parathink_stage, stage_component

FLAKY = Path(__file__).parent / "stages" / "flaky.py"


def _run_flaky(tmp_path: Path, mode: str, failures: int = 0, retries: int = 2):
    counter = tmp_path / "attempts"
    overrides = [f"+stage_modules.flaky={FLAKY}", f"+flaky.mode={mode}", f"+flaky.failures={failures}",
                 f"+flaky.counter={counter}", "tracking=none"]
    try:
        out = parathink_stage(stage="flaky", run_dir=str(tmp_path / "run"), overrides=overrides, trainjob=False,
                              retries=retries, retry_backoff_s=0)
        code = 0
    except SystemExit as exit_:
        out, code = None, exit_.code
    return out, code, int(counter.read_text())


def test_exit_1_is_retried_until_it_succeeds(tmp_path, capfd):
    out, code, attempts = _run_flaky(tmp_path, "error", failures=1)
    assert (code, attempts, out) == (0, 2, str(tmp_path / "run"))
    assert (tmp_path / "run" / "flaky" / "done.txt").read_text() == "2"
    assert "stage flaky exited 1 (attempt 1 of 3); retrying" in capfd.readouterr().out


def test_exit_1_gives_up_after_the_profile_retries(tmp_path):
    _, code, attempts = _run_flaky(tmp_path, "error", failures=5, retries=1)
    assert (code, attempts) == (1, 2)


@pytest.mark.parametrize("mode, expected", [("bad_input", 2), ("gate", 3)])
def test_exit_2_and_3_are_never_retried(tmp_path, capfd, mode, expected):
    _, code, attempts = _run_flaky(tmp_path, mode, retries=2)
    assert (code, attempts) == (expected, 1)
    assert f"parathink-kfp: stage flaky exited {expected}" in capfd.readouterr().out


def test_one_component_per_stage_named_after_it():
    names = {stage: stage_component(stage).component_spec.name for stage in STAGES}
    assert names == {s: s.replace("_", "-") for s in STAGES}
    with pytest.raises(ValueError, match="no component for stage 'tiny'"):
        stage_component("tiny")


def test_metadata_lists_the_components_of_the_code():
    meta = yaml.safe_load((ROOT / "components" / "metadata.yaml").read_text())
    assert [c["name"] for c in meta["components"]] == list(STAGES)

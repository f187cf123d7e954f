"""Adding a stage touches one folder and one registry line: ``tests/stages/toy_stage/`` (run, check, gate with its
thresholds, role) plugged in by ``stage_modules.toy=<folder>`` runs, is gated, and is placed and sized by its role,
with no change anywhere in the package."""

import json
from pathlib import Path

import pytest

from parathink.errors import ConfigError
from parathink.pipeline import runner
from parathink.pipeline.compose import compose
from parathink.placement import cluster, memory_model
from parathink.placement.roles import NO_MODEL, StageRole
from parathink.rundir.manifest import MANIFEST

TOY = str(Path(__file__).with_name("toy_stage"))


def toy(run_dir: Path, *extra: str) -> list[str]:
    return [f"run_dir={run_dir}", "tracking=none", "stages=[toy]", f"+stage_modules.toy={TOY}", "+toy.count=3",
            "+toy.word=path", "+toy.gate.enabled=true", *extra]


def test_a_stage_folder_runs_and_its_gate_judges_the_output(tmp_path, capsys):
    assert runner.main_run(toy(tmp_path / "run", "+toy.gate.min_lines=3")) == 0
    out = tmp_path / "run" / "toy"
    assert (out / "count.txt").read_text() == "path\npath\npath\n"
    gates = json.loads((out / MANIFEST).read_text())["gates"]
    assert gates["passed"] is True
    assert [(e["name"], e["observed"], e["threshold"]) for e in gates["expectations"]] == [("lines", 3, 3)]

    # The gate is the folder's own: a threshold the output misses stops the run (exit 3, docs/gates.md).
    assert runner.main_run(toy(tmp_path / "run", "+toy.gate.min_lines=4")) == 3
    assert "toy gate: FAILED" in capsys.readouterr().err


def test_a_stage_folder_is_checked_and_placed_by_what_it_declares(tmp_path):
    with pytest.raises(ConfigError, match=r"toy\.count: a whole number >= 0, got -1"):
        runner.validate(compose(toy(tmp_path, "toy.count=-1", "+toy.gate.min_lines=1")), ["toy"])
    cfg = compose(toy(tmp_path, "+toy.gate.min_lines=1"))
    assert runner.stage_roles(cfg, ["toy"]) == {"toy": StageRole(memory="weights")}
    placed = cluster.plan(cfg, runner.stage_roles(cfg, ["toy"]))["toy"]
    expected = memory_model.stage_budget(cfg, "toy", StageRole(memory="weights"), 1, None)
    assert placed.device_memory is not None and placed.device_memory["estimate_bytes"] == expected.estimate > 0
    # The same folder declaring no role holds no model: nothing to size.
    assert cluster.plan(cfg, {"toy": NO_MODEL})["toy"].device_memory is None


def test_a_folder_without_init_is_refused_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    cfg = compose([f"+stage_modules.toy={tmp_path / 'empty'}", "stages=[toy]"])
    with pytest.raises(ConfigError, match=r"stage_modules\.toy: folder .*empty has no __init__\.py"):
        runner.stage_module(cfg, "toy")

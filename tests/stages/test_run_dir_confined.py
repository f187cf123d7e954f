"""A run directory cannot be escaped, and a manifest is checked against itself before it is trusted (issue 48 items 3
and 4): a symlink leading out of the run directory is refused in one line (exit 2) with nothing deleted or written
where it points; a manifest whose version or outputs table disagrees with its output hash counts as no output."""

import json
from pathlib import Path

import pytest

from parathink.pipeline import runner
from parathink.rundir.confine import OutsideRunDir
from parathink.rundir.folder import RunDir
from parathink.rundir.lock import StageLock, break_lock
from parathink.rundir.manifest import MANIFEST, Manifest, ManifestDamaged, combined_hash


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the run directory holding something that must survive."""
    where = tmp_path / "X"
    (where / "prep").mkdir(parents=True)
    (where / "prep" / "keep.txt").write_text("precious")
    return where


def untouched(where: Path) -> bool:
    return (sorted(p.relative_to(where).as_posix() for p in where.rglob("*")) == ["prep", "prep/keep.txt"]
            and (where / "prep" / "keep.txt").read_text() == "precious")


def one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[parathink]")]
    assert len(err) == 1, err
    return err[0]


def test_a_symlinked_tmp_makes_a_forced_stage_delete_nothing_outside(curriculum, outside, capsys):
    """The issue's reproduction: ``<run_dir>/.tmp`` -> /X, and a forced stage deleted /X/<stage> and wrote there."""
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    run = Path(curriculum.run_dir)
    (run / ".tmp").rmdir()
    (run / ".tmp").symlink_to(outside)
    capsys.readouterr()
    assert runner.main_run(curriculum.overrides("force=[prep]", stages=("prep",))) == 2
    line = one_line(capsys)
    assert line.startswith(f"parathink: error: {run / '.tmp'} leads out of the run directory"), line
    assert untouched(outside)
    assert (run / "prep" / "value.txt").read_text() == "3"  # the published output stands


@pytest.mark.parametrize("link", [".work", ".work/prep", ".tmp", ".tmp/prep", ".locks", ".locks/prep.lock", "prep"])
def test_every_folder_a_stage_writes_is_refused_through_a_symlink_out(tmp_path, outside, link):
    run = tmp_path / "run"
    rundir = RunDir(str(run))
    target = outside / "prep" / "keep.txt" if link.endswith(".lock") else outside / "prep" if "/" in link else outside
    (run / link).parent.mkdir(parents=True, exist_ok=True)
    (run / link).symlink_to(target)
    with pytest.raises(OutsideRunDir, match="leads out of the run directory"):
        if link.startswith(".work"):
            rundir.work_dir("prep")
        elif link.startswith(".tmp"):
            rundir.fresh_tmp("prep")
        elif link.startswith(".locks"):
            StageLock(rundir.root, "prep").acquire()
        else:
            rundir.manifest("prep")
    if link.startswith(".locks"):
        with pytest.raises(OutsideRunDir):
            break_lock(rundir.root, "prep")
    if link == "prep":
        tmp = rundir.fresh_tmp("prep")
        (tmp / "value.txt").write_text("1")
        m = Manifest(stage="prep", config_hash="h", config={}, inputs={})
        m.finish(tmp, {})
        with pytest.raises(OutsideRunDir):
            rundir.publish("prep", tmp, m)
    assert untouched(outside)


def test_a_symlink_that_stays_inside_the_run_directory_is_followed(tmp_path):
    run = tmp_path / "run"
    (run / "elsewhere").mkdir(parents=True)
    (run / ".tmp").symlink_to(run / "elsewhere")
    tmp = RunDir(str(run)).fresh_tmp("prep")
    assert tmp.resolve() == (run / "elsewhere" / "prep").resolve() and tmp.is_dir()


# ---------------------------------------------------------------- the manifest checked against itself

def _published(tmp_path) -> tuple[Path, dict]:
    out = tmp_path / "prep"
    out.mkdir()
    (out / "value.txt").write_text("3")
    m = Manifest(stage="prep", config_hash="h", config={}, inputs={})
    m.finish(out, {})
    return out, json.loads(m.to_json())


@pytest.mark.parametrize("change, why", [
    ({"outputs": {}}, "does not combine to its output_hash"),
    ({"output_hash": "0" * 16}, "does not combine to its output_hash"),
    ({"version": 99}, "version 99 is not 2"),
    ({"version": 1}, "version 1 is not 2"),
    ({"version": True}, "version True is not 2"),
    ({"version": None}, "version None is not 2"),
])
def test_a_manifest_that_disagrees_with_itself_is_damaged(tmp_path, change, why):
    _, data = _published(tmp_path)
    Manifest.from_json(json.dumps(data))  # as written: trusted
    with pytest.raises(ManifestDamaged, match=why):
        Manifest.from_json(json.dumps({**data, **change}))


def test_an_extra_entry_in_the_outputs_table_changes_the_combined_hash(tmp_path):
    _, data = _published(tmp_path)
    assert combined_hash(data["outputs"]) == data["output_hash"]
    more = {**data["outputs"], "other.txt": {"sha256": "0" * 64, "size": 0}}
    with pytest.raises(ManifestDamaged):
        Manifest.from_json(json.dumps({**data, "outputs": more}))


def test_the_manifest_of_another_stage_in_a_stage_s_folder_is_no_output(tmp_path):
    run = tmp_path / "run"
    rundir = RunDir(str(run))
    _, data = _published(run)
    (run / "prep" / MANIFEST).write_text(json.dumps(data))
    assert rundir.manifest("prep") is not None
    (run / "other").mkdir()
    (run / "other" / MANIFEST).write_text(json.dumps(data))
    assert rundir.manifest("other") is None


def test_an_emptied_outputs_table_and_an_edited_output_rerun_the_stage(curriculum):
    """The issue's reproduction: ``outputs: {}`` checked no file, and an edited output was "up to date"."""
    overrides = curriculum.overrides(stages=("prep",))
    assert runner.main_run(overrides) == 0
    path = Path(curriculum.run_dir) / "prep" / MANIFEST
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "outputs": {}}))
    (Path(curriculum.run_dir) / "prep" / "value.txt").write_text("999")
    assert runner.main_run(overrides) == 0
    assert curriculum.ran() == ["prep", "prep"]
    assert (Path(curriculum.run_dir) / "prep" / "value.txt").read_text() == "3"
    assert json.loads(path.read_text())["output_hash"] == data["output_hash"]


@pytest.mark.parametrize("link", ["report.md", ".tracking", "report"])
def test_the_report_writes_nothing_through_a_symlink_out(tmp_path, outside, link):
    """``parathink report`` removes and rewrites its plot folder and writes report.md and its figure in place."""
    from parathink import report

    run = tmp_path / "run"
    run.mkdir()
    (run / link).symlink_to(outside / "prep" / "keep.txt" if link.endswith(".md") else outside)
    with pytest.raises(OutsideRunDir, match="leads out of the run directory"):
        report.write(RunDir(str(run)), "tiny", ["prep"])
    assert untouched(outside)


@pytest.mark.parametrize("link", [".gates", ".tmp"])
def test_a_gate_writes_no_report_or_cache_through_a_symlink_out(tmp_path, outside, link):
    """A gate's probe caches its figures in ``.gates`` and writes its report in the stage's scratch."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from parathink.pipeline import gating

    run = tmp_path / "run"
    run.mkdir()
    (run / link).symlink_to(outside)
    cfg = OmegaConf.create({"seed": 0, "prep": {"gate": {"enabled": True}}})
    stage = SimpleNamespace(gate=SimpleNamespace(check=lambda cfg, out: pytest.fail("the gate ran")))
    manifest = Manifest(stage="prep", config_hash="h", config={}, inputs={})
    with pytest.raises(OutsideRunDir, match="leads out of the run directory"):
        gating.evaluate(cfg, "prep", stage, run / "prep", run / ".tmp" / "prep" / "_gates", manifest, RunDir(str(run)))
    assert untouched(outside)

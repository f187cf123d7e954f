"""Run-directory integrity (issue 21): one process per stage (a lock on local disk and on S3), published files checked
against their manifest, staleness through the whole chain of inputs, a damaged manifest counted as unpublished."""

import hashlib
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
from servers import moto_s3

from parathink import storage
from parathink.pipeline import runner
from parathink.rundir.manifest import MANIFEST


def manifest(run_dir, stage) -> dict:
    return json.loads(storage.read_text(storage.join(run_dir, stage, MANIFEST)))


def _start(curriculum, *extra, name="prep") -> subprocess.Popen:
    """``parathink stage NAME`` in another process (what a second DAG run or a retried pod is)."""
    cmd = [sys.executable, "-m", "parathink.cli", "stage", name, *curriculum.overrides(*extra)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CI="true"))


def _wait_until_running(curriculum, proc, stage="prep"):
    while stage not in curriculum.ran():
        if proc.poll() is not None:
            pytest.fail(f"the holder exited early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)


def _published_bytes_match(run_dir, stage) -> bool:
    m = manifest(run_dir, stage)
    return all(hashlib.sha256(storage.read_bytes(storage.join(run_dir, stage, rel))).hexdigest() == meta["sha256"]
               for rel, meta in m["outputs"].items())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_stage_runs_in_one_process_at_a_time(curriculum, tmp_path, capsys, where):
    release = tmp_path / "release"
    with moto_s3("runs") if where == "s3" else nullcontext():
        if where == "s3":
            curriculum.run_dir = "s3://runs/exp"
        holder = _start(curriculum, f"+prep.wait_for={release}", f"cache_dir={tmp_path / 'cache-a'}")
        try:
            _wait_until_running(curriculum, holder)
            second = curriculum.overrides(f"cache_dir={tmp_path / 'cache-b'}")
            assert runner.main_stage("prep", second) == 1  # busy: an orchestrator retries later
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"pid {holder.pid}" in err[0] and "parathink unlock" in err[0], err
            assert curriculum.ran() == ["prep"]  # the second process never ran the stage
        finally:
            release.touch()
            out, err = holder.communicate(timeout=300)
        assert holder.returncode == 0, err[-2000:]
        assert _published_bytes_match(curriculum.run_dir, "prep")
        assert runner.main_stage("prep", curriculum.overrides(f"+prep.wait_for={release}",
                                                              f"cache_dir={tmp_path / 'cache-b'}")) == 0
        assert curriculum.ran() == ["prep"]  # the retry finds the holder's output up to date


def test_a_killed_holder_leaves_no_lock_behind(curriculum, tmp_path):
    holder = _start(curriculum, f"+prep.wait_for={tmp_path / 'never'}")
    _wait_until_running(curriculum, holder)
    holder.kill()
    holder.wait(timeout=60)
    assert runner.main_stage("prep", curriculum.overrides()) == 0
    assert (Path(curriculum.run_dir) / "prep" / "value.txt").read_text() == "3"


def test_an_expired_s3_lease_is_taken_over_and_unlock_breaks_a_live_one(tmp_path, capsys):
    from parathink.cli import main as cli
    from parathink.rundir.lock import LockHeld, StageLock

    with moto_s3("runs"):
        dead = StageLock("s3://runs/x", "prep", ttl_s=1, heartbeat=False)
        dead.acquire()
        with pytest.raises(LockHeld, match=rf"pid {os.getpid()}"):
            StageLock("s3://runs/x", "prep").acquire()
        time.sleep(2.5)  # the lease is not renewed: it expires
        taker = StageLock("s3://runs/x", "prep")
        taker.acquire()  # an expired lease is taken over
        try:
            with pytest.raises(LockHeld):
                StageLock("s3://runs/x", "prep").acquire()
            assert cli(["unlock", "s3://runs/x", "prep"]) == 0
            assert "prep" in capsys.readouterr().err
            StageLock("s3://runs/x", "prep").acquire()  # broken: free again
        finally:
            taker.release()


def test_a_renewed_lease_does_not_expire_and_a_lost_one_refuses_to_publish(tmp_path):
    from parathink.rundir.lock import LockHeld, LockLost, StageLock

    with moto_s3("runs"):
        live = StageLock("s3://runs/y", "prep", ttl_s=2)
        live.acquire()
        try:
            time.sleep(3.5)
            with pytest.raises(LockHeld):
                StageLock("s3://runs/y", "prep").acquire()
            live.check()
        finally:
            live.release()
        stalled = StageLock("s3://runs/y", "prep", ttl_s=1, heartbeat=False)
        stalled.acquire()
        time.sleep(2.5)
        StageLock("s3://runs/y", "prep").acquire()
        with pytest.raises(LockLost, match="prep"):
            stalled.check()


def test_a_same_size_edit_of_a_published_file_is_seen(curriculum, capsys):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    value = Path(curriculum.run_dir) / "prep" / "value.txt"
    st = value.stat()
    value.write_text("4")  # same size as "3"
    os.utime(value, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert runner.main_stage("train", curriculum.overrides()) == 2  # never consumed
    err = capsys.readouterr().err
    assert "'prep'" in err and "value.txt" in err, err
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert value.read_text() == "3" and curriculum.ran().count("prep") == 2


def test_touching_a_published_file_keeps_it_up_to_date(curriculum):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    value = Path(curriculum.run_dir) / "prep" / "value.txt"
    st = value.stat()
    os.utime(value, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # new mtime, same bytes: rehashed, unchanged
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert curriculum.ran() == ["prep"]


def test_an_overwritten_s3_object_is_seen(curriculum, tmp_path, capsys):
    with moto_s3("runs"):
        curriculum.run_dir = "s3://runs/exp"
        over = curriculum.overrides(f"cache_dir={tmp_path / 'cache'}", stages=("prep",))
        assert runner.main_run(over) == 0
        assert all("etag" in meta for meta in manifest(curriculum.run_dir, "prep")["outputs"].values())
        storage.write_bytes("s3://runs/exp/prep/value.txt", b"")  # a 0-byte overwrite
        assert runner.main_stage("train", over) == 2
        assert "value.txt" in capsys.readouterr().err
        assert runner.main_run(over) == 0
        assert storage.read_text("s3://runs/exp/prep/value.txt") == "3" and curriculum.ran().count("prep") == 2


def test_an_external_input_file_is_an_input(tmp_path):
    raw = tmp_path / "raw.jsonl"
    rows = [{"id": f"p{i}", "problem": f"q{i}", "answer": "1", "response": "so \\boxed{1}"} for i in range(20)]
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    over = [f"run_dir={tmp_path / 'run'}", "tracking=none", f"filter.input={raw}", "filter.gate.enabled=false"]
    assert runner.main_stage("filter", over) == 0
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows[:5]))
    assert runner.main_stage("filter", over) == 0
    assert manifest(str(tmp_path / "run"), "filter")["metrics"]["records"] == 5.0


def test_pointing_a_stage_at_another_module_reruns_it(curriculum, tmp_path):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    other = tmp_path / "other_stage.py"
    other.write_text(Path(__file__).with_name("resume_stage.py").read_text())  # same code, another module
    assert runner.main_run(curriculum.overrides(f"stage_modules.prep={other}", stages=("prep",))) == 0
    assert curriculum.ran() == ["prep", "prep"]


def test_a_stage_whose_input_is_out_of_date_is_not_up_to_date(curriculum, capsys):
    assert runner.main_run(curriculum.overrides()) == 0
    assert runner.main_run(curriculum.overrides("prep.steps=3", stages=("prep",))) == 0  # prep republished
    assert runner.main_stage("tune", curriculum.overrides("prep.steps=3")) == 2  # train is behind prep
    err = capsys.readouterr().err
    assert "'train'" in err and "'prep'" in err, err
    assert runner.main_run(curriculum.overrides("prep.steps=3")) == 0
    assert (Path(curriculum.run_dir) / "tune" / "value.txt").read_text() == str(6 + 10 + 6)


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"stage": "prep"}',
                                    '{"stage": "prep", "config_hash": "x", "config": {}, "inputs": [], '
                                    '"output_hash": "y", "outputs": {"../../etc/passwd": {"size": 1}}}'],
                         ids=["not-json", "a-list", "missing-keys", "bad-types"])
def test_a_damaged_manifest_counts_as_unpublished(curriculum, capsys, damage):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    path = Path(curriculum.run_dir) / "prep" / MANIFEST
    path.write_text(damage)
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    assert curriculum.ran() == ["prep", "prep"]
    assert f"{path}" in capsys.readouterr().err
    assert manifest(curriculum.run_dir, "prep")["stage"] == "prep"


@pytest.mark.parametrize("name", ["run.json", ".work/prep/_attempt.json"])
def test_damaged_run_records_are_warned_about_not_fatal(curriculum, capsys, name):
    assert runner.main_run(curriculum.overrides(stages=("prep",))) == 0
    path = Path(curriculum.run_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{damaged")
    assert runner.main_run(curriculum.overrides("force=[prep]", stages=("prep",))) == 0
    assert str(path) in capsys.readouterr().err

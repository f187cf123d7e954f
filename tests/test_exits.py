"""Errors a user can act on end in one line and their exit code, with no traceback (parathink.exits)."""

import pytest

from parathink.exits import guarded
from parathink.teacher import TeacherUnavailable
from parathink.training.rl import TrainingDiverged


@pytest.mark.parametrize("err, code", [(TeacherUnavailable("http://127.0.0.1:9/v1: no answer after 4 tries"), 1),
                                       (TrainingDiverged("rl_easy: 3 steps in a row skipped; Lower rl_easy.lr"), 2)])
def test_one_line_and_the_code(capsys, err, code):
    def fail():
        raise err

    assert guarded(fail) == code
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"parathink: error: {err}"]


def test_sigterm_stops_a_stage_running_as_pid_1_in_one_line_with_exit_143(tmp_path):
    """A stage pod's container runs ``parathink`` as PID 1, and the kernel gives PID 1 no default action for
    SIGTERM: without parathink's handler the kubelet's stop (a deleted pod) would be ignored until SIGKILL. Here the
    stage runs as PID 1 of a PID namespace of its own (``unshare``, as root; the container's situation without the
    container) and gets SIGTERM once it runs: it must end at once, exit 143, one line, nothing published."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("needs util-linux's unshare and root (this suite's machines have both)")
    run_dir = tmp_path / "run"
    argv = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-m", "parathink.cli", "stage", "teacher",
            f"run_dir={run_dir}", "experiment=tiny", "teacher.self.model=builtin:tiny_base", "tracking=none"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    deadline = time.monotonic() + 300  # a bound on the wait, not a figure under test
    for line in proc.stderr:
        lines.append(line.rstrip())
        if "teacher: running" in line or time.monotonic() > deadline:
            break
    assert "teacher: running" in lines[-1], "\n".join(lines[-20:])
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    nspid = [line.split()[1:] for line in Path(f"/proc/{children[0]}/status").read_text().splitlines()
             if line.startswith("NSpid:")]
    assert nspid and nspid[0][-1] == "1", f"the stage is not PID 1 of its namespace: NSpid {nspid}"
    time.sleep(1.0)  # into the stage's work, past its start-up
    os.kill(int(children[0]), signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("SIGTERM did not stop the stage running as PID 1 within 60 s")
    rest = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 143, "\n".join(lines[-10:] + rest[-10:])
    assert rest[-1].startswith("parathink: stopped (SIGTERM"), rest[-5:]
    assert not (run_dir / "teacher" / "_manifest.json").exists()

"""``parathink kfp run --local``: the compiled pipeline's tasks run on this machine through ``kfp.local``.

``SubprocessRunner(use_venv=False)`` runs each lightweight component in a subprocess of this Python (no image, no
pip install), in task order. The Kubernetes settings (GPUs, node pools, /dev/shm, Secrets) are ignored locally;
everything else is the pipeline that a cluster runs.

``kfp.local`` reports only that a task failed. The component prints ``parathink-kfp: stage NAME exited CODE`` as
its last line, and kfp.local copies each task's output to this process's stdout, so the run's exit code is read
from there: a gate failure exits 3 here too, as with ``parathink run``.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import warnings
from pathlib import Path

from parathink.kfp.plan import Plan

STAGE_EXIT = re.compile(r"^\s*parathink-kfp: stage (\S+) exited (\d+)", re.MULTILINE)  # kfp.local indents logs


class _Tee(io.TextIOBase):
    """Writes through to ``stream`` and keeps the components' exit lines (kfp.local prints each log line whole)."""

    def __init__(self, stream):
        self.stream, self.exits = stream, []

    def write(self, text: str) -> int:
        self.exits += STAGE_EXIT.findall(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def local_run_dir(run_dir: str) -> str:
    """An absolute path (tasks run as subprocesses; an s3:// URI is used as it is)."""
    return run_dir if "://" in run_dir else str(Path(run_dir).resolve())


def run(plan: Plan, pipeline_root: str) -> int:
    """Run ``plan``'s pipeline with kfp.local; the exit code of the stage that failed, or 0."""
    from kfp import local

    from parathink.kfp.pipeline import build

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=pipeline_root, raise_on_error=True)
    pipeline = build(plan)
    tee = _Tee(sys.stdout)
    with warnings.catch_warnings():
        # kfp.local warns for every task whose image name lacks "python"; the trainer image is not used locally.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        try:
            with contextlib.redirect_stdout(tee):
                pipeline(run_dir=local_run_dir(plan.run_dir))
        except RuntimeError:  # kfp.local's message names the task; the stage's own message is in the log above
            stage, code = tee.exits[-1] if tee.exits else ("(unknown)", "1")
            print(f"parathink: error: the pipeline stopped at stage {stage} (exit {code})", file=sys.stderr)
            return int(code)
    return 0

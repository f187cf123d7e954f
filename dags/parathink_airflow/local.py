"""One ``parathink`` call as a subprocess of the Airflow task (``executor=local``, and the plan where the worker has
``parathink``).

The command is ``$PARATHINK_BIN`` or the ``parathink`` on PATH (``make airflow`` puts the project's ``.venv/bin``
first). It gets an argv list, never a shell; it runs in ``$PARATHINK_WORKDIR`` (default: the checkout that holds
``dags/``), where relative run directories and the default ``sqlite:///mlflow.db`` resolve. Its output is
streamed line by line into the task log; progress bars print one line per update.

An Airflow without it (a platform team's, with only ``dags/``) plans in a pod of the trainer image instead
(:func:`plan_in` decides, ``pods.plan_in_pod`` runs it).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
TAIL_LINES = 30  # kept for the failure message: a gate's report path, a bad override's one-line error
PROGRESS_EVERY_S = "10"  # tqdm's minimum interval between progress lines in the task log
STOP_GRACE_S = 30  # a killed task gives its stage this long to exit before SIGKILL


PLAN_IN_ENV = "PARATHINK_PLAN_IN"
PLAN_IN = ("auto", "worker", "pod")


class CommandMissing(RuntimeError):
    """No ``parathink`` command to run."""


class SettingError(RuntimeError):
    """A deployment setting (an environment variable of the worker) this task cannot work with; one line."""


@dataclass(frozen=True)
class Finished:
    code: int
    tail: tuple[str, ...]  # the last lines of output

    def last(self, prefix: str = "parathink:") -> str:
        """The last line starting with ``prefix`` (parathink's one-line errors), else the last line."""
        for line in reversed(self.tail):
            if line.startswith(prefix):
                return line
        return self.tail[-1] if self.tail else "(no output)"


def find_command(env: Mapping[str, str] | None = None) -> str | None:
    """``$PARATHINK_BIN``, else the ``parathink`` on ``$PATH``, else None."""
    env = os.environ if env is None else env
    return env.get("PARATHINK_BIN") or shutil.which("parathink", path=env.get("PATH"))


def command() -> str:
    found = find_command()
    if not found:
        raise CommandMissing("parathink: not found; set PARATHINK_BIN or put the project's .venv/bin on PATH")
    return found


def plan_in(env: Mapping[str, str] | None = None) -> str:
    """Where the plan runs: ``worker`` (``parathink plan`` as a subprocess here) or ``pod`` (in the trainer image,
    pods.plan_in_pod). ``PARATHINK_PLAN_IN=worker|pod`` forces either; ``auto`` (the default) plans on the worker
    when it has a ``parathink`` (:func:`find_command`, the check that raises CommandMissing) and in a pod when not."""
    env = os.environ if env is None else env
    chosen = (env.get(PLAN_IN_ENV) or "auto").strip()
    if chosen not in PLAN_IN:
        raise SettingError(f"{PLAN_IN_ENV}: {chosen!r} is not one of {', '.join(PLAN_IN)}")
    if chosen == "auto":
        return "worker" if find_command(env) else "pod"
    return chosen


def workdir() -> Path:
    return Path(os.environ.get("PARATHINK_WORKDIR") or CHECKOUT)


def child_env() -> dict[str, str]:
    """The task's environment minus Airflow's own settings (its JWT secret among them): parathink needs none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(PYTHONUNBUFFERED="1", TQDM_MININTERVAL=PROGRESS_EVERY_S)
    return env


def stream(argv: Sequence[str], log: Callable[[str], None],
           started: Callable[[subprocess.Popen], None] | None = None) -> Finished:
    """Run ``parathink ARGV...``, log every output line, return its exit code and last lines; ``started`` gets
    the process as soon as it runs (the task's on_kill stops it)."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    # text=True reads with universal newlines: a progress bar's '\r' updates arrive as separate lines.
    proc = subprocess.Popen([command(), *argv], cwd=workdir(), env=child_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if started:
        started(proc)
    try:
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                log(line)
                tail.append(line)
        return Finished(proc.wait(), tuple(tail))
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """A task killed from Airflow (mark failed, timeout) must not leave its stage running."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def plan(args: Sequence[str]) -> dict:
    """``parathink plan ARGS`` as a dict; a bad config raises PlanRefused with parathink's one line."""
    proc = subprocess.run([command(), "plan", *args], cwd=workdir(), env=child_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise refused(proc.returncode, proc.stderr)
    return json.loads(proc.stdout)


def refused(code: int, output: str) -> PlanRefused:
    """A failed ``parathink plan`` as PlanRefused with its one line (its last ``parathink:`` line), wherever it ran:
    the worker's stderr or a plan pod's log."""
    lines = [line for line in output.splitlines() if line.strip()]
    return PlanRefused(code, Finished(code, tuple(lines[-TAIL_LINES:])).last())


class PlanRefused(RuntimeError):
    def __init__(self, code: int, line: str):
        super().__init__(line)
        self.code = code


"""From what a command raised to its exit code and its one line on stderr (docs/orchestration.md).

0 done; 2 bad input or configuration, never retried; 3 a quality gate failed, the pipeline stops; 1 anything else:
a service that may come back (one line), or a bug (its traceback); 130 interrupted (Ctrl-C), 143 stopped
(SIGTERM). The errors a user can act on carry their code (``parathink.errors``); every ``parathink`` subcommand
that runs stages returns ``guarded(...)``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

from parathink import distributed
from parathink.errors import ParathinkError
from parathink.redact import redact_text

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_GATE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143, as a shell reports a process that SIGTERM ended


class Terminated(BaseException):
    """SIGTERM, raised in the main thread: a stop unwinds like Ctrl-C (locks released, child processes stopped,
    nothing half-published) and ends the process with exit 143. A BaseException, so that no ``except Exception``
    retry or fallback swallows it."""


def stop_on_sigterm() -> None:
    """Make SIGTERM end this process through ``Terminated``.

    In a container the stage is PID 1, and the kernel gives PID 1 no default action for SIGTERM: without a
    handler, the kubelet's stop (a deleted pod: a task marked failed in Airflow, a cancelled KFP run) is ignored
    and the stage runs on, GPUs held, until SIGKILL ends the grace period. A handler someone else installed
    (a test, an embedding program) is left as it is.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


_sigterm = threading.Event()
# A library may catch the stop on its way up (transformers' lazy imports turn it into a ModuleNotFoundError, which a
# fallback may then handle) and the stage would run on: past this, the process ends anyway, as SIGKILL would end it
# (published outputs are atomic: nothing is half-written), only sooner and with its line and exit code.
UNWIND_S = 10.0


def _terminated(signum, frame) -> None:
    if _sigterm.is_set():
        return  # already stopping
    _sigterm.set()
    threading.Thread(target=_exit_after_unwind, name="parathink-sigterm", daemon=True).start()
    raise Terminated()


def stopped() -> int:
    """The stop's one line; its exit code."""
    print("parathink: stopped (SIGTERM)", file=sys.stderr)
    return EXIT_TERMINATED


def _exit_after_unwind() -> None:
    time.sleep(UNWIND_S)
    os.write(2, f"parathink: stopped (SIGTERM; not unwound within {UNWIND_S:.0f} s)\n".encode())
    os._exit(EXIT_TERMINATED)


def guarded(fn: Callable[[], object]) -> int:
    """Run ``fn``; its exit code. A failed process leaves the launch's group at once (``distributed.abandon``)."""
    code = _run(fn)
    if code != EXIT_OK:
        distributed.abandon()
    return code


def _run(fn: Callable[[], object]) -> int:
    try:
        fn()
        return EXIT_OK
    except KeyboardInterrupt:
        print("parathink: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        return stopped()
    except Exception as err:
        if _sigterm.is_set():  # the stop, caught and re-raised as something else on its way (an import mid-load)
            return stopped()
        code = exit_code(err)
        if code is None:
            traceback.print_exc()
            return EXIT_ERROR
        what = "quality gate failed" if code == EXIT_GATE else "error"
        print(f"parathink: {what}: {redact_text(' '.join(str(err).split()))}", file=sys.stderr)
        return code


def exit_code(err: Exception) -> int | None:
    """The exit code of an error the user can act on (one line, no traceback); None for a bug."""
    if isinstance(err, ParathinkError):  # GateFailed among them: exit 3
        return int(type(err).exit_code)
    if isinstance(err, FileNotFoundError):  # a path the config names (a model source, a file) does not exist
        return EXIT_BAD_INPUT
    return None

"""From what a command raised to its exit code and its one line on stderr (docs/orchestration.md).

0 done; 2 bad input or configuration, never retried; 3 a quality gate failed, the pipeline stops; 1 anything else:
a service that may come back (one line), or a bug (its traceback). The errors a user can act on carry their code
(``parathink.errors``); every ``parathink`` subcommand that runs stages returns ``guarded(...)``.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from parathink import distributed
from parathink.errors import ParathinkError
from parathink.redact import redact_text

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_GATE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


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
    except Exception as err:
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

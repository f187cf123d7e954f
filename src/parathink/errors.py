"""Errors a user can act on, each with the exit code the orchestrators read (docs/orchestration.md).

The CLI prints such an error as one line and exits with its ``exit_code``; anything else is a bug and gets its
traceback (exit 1). ``BadInput`` (2) is never retried: the same input fails the same way. ``Unavailable`` (1) is
something that may come back (a server, a lock another process holds), so a retry is the remedy.
"""

from __future__ import annotations


class ParathinkError(Exception):
    exit_code = 1


class BadInput(ParathinkError, ValueError):
    """A config value, a file or a record that cannot work; the message names it and where it is."""

    exit_code = 2


class Unavailable(ParathinkError):
    """A service or a resource that is not there now (an unreachable server, a stage another process runs)."""

    exit_code = 1

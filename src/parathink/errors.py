"""Errors a user can act on, each with the exit code the orchestrators read (docs/orchestration.md).

The CLI prints such an error as one line and exits with its ``exit_code`` (``parathink.exits``); anything else is a
bug and gets its traceback (exit 1). ``BadInput`` (2) is never retried: the same input fails the same way.
``Unavailable`` (1) is something that may come back (a server, a lock another process holds), so a retry is the
remedy. ``parathink.quality.GateFailed`` (3) stops a pipeline: a stage's output did not pass its quality gate.
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


class ConfigError(BadInput):
    """A configuration value that cannot work; the message names the key."""


class StageInputMissing(ParathinkError, FileNotFoundError):
    """A stage asked for the output of a stage that has not produced it."""

    exit_code = 2


class StageInputStale(BadInput):
    """A stage asked for an output that was altered after it was published, or made from inputs since replaced."""

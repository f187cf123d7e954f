"""Data and model quality: the trace filter (Parallel-R1 Sec. 3.1's "keep parallel and correct") and the gate
after every stage (docs/gates.md).

``GateFailed`` lives here, free of great-expectations and torch, so that callers can catch it cheaply; it carries
exit code 3 (``parathink.errors``): the orchestrators stop the pipeline there and never retry it.
"""

from parathink.errors import ParathinkError


class GateFailed(ParathinkError):
    """A stage's quality gate failed; the message names each failed expectation with its observed value."""

    exit_code = 3

    def __init__(self, message: str, failures: list | None = None, report_dir: str | None = None):
        super().__init__(message)
        self.failures = failures or []
        self.report_dir = report_dir


__all__ = ["GateFailed"]

"""Data quality: the trace filter (Parallel-R1 Sec. 3.1's "keep parallel and correct") and the
great-expectations gates that run between stages.

``GateFailed`` lives here, free of great-expectations, so that callers (the runner maps it to exit code 3)
can catch it without importing GE; ``parathink.quality.gates`` imports GE when a gate runs.
"""


class GateFailed(RuntimeError):
    """A data-quality gate failed; the message lists each failed expectation with its observed value."""

    def __init__(self, message: str, failures: list[dict] | None = None, report_dir: str | None = None):
        super().__init__(message)
        self.failures = failures or []
        self.report_dir = report_dir


__all__ = ["GateFailed"]

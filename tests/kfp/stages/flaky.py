"""A plug-in stage (``stage_modules``) for the component's retry test: it counts its attempts in a file and fails
as ``flaky.mode`` says: ``error`` (exit 1) for the first ``flaky.failures`` attempts, ``bad_input`` (exit 2),
``gate`` (exit 3)."""

from pathlib import Path

from parathink.errors import ConfigError
from parathink.quality import GateFailed


def run(cfg, ctx):
    counter = Path(cfg.flaky.counter)
    attempt = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempt))
    mode = cfg.flaky.mode
    if mode == "error" and attempt <= int(cfg.flaky.failures):
        raise RuntimeError(f"transient failure {attempt}")
    if mode == "bad_input":
        raise ConfigError("flaky.mode: bad input on purpose")
    if mode == "gate":
        raise GateFailed("1 expectation(s) failed on purpose")
    (ctx.out_dir / "done.txt").write_text(str(attempt))
    return {"attempts": attempt}

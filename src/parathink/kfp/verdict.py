"""A task's verdict: the exit code of a failure that KFP's retry must not run again, kept in the run directory.

Every task carries KFP's retry policy (:func:`parathink.kfp.tasks.retry_lost_pods`) because a pod can be lost
(its node preempted or drained, the pod evicted, its container OOM-killed): the component's process is gone with
it, so the component's own retries of exit 1 never happen. But KFP retries every failed task, and some failures
must never run twice: exit 2 (bad input) and 3 (a gate failed) fail the same way again, and exit 1 has already had
the stage's ``retries`` inside the component. So before it exits with one of those, the component records the code
at ``<run_dir>/.kfp/verdicts/<KFP run id>/<stage>.json``; a KFP retry of the task finds it and exits with the same
code at once, without starting the stage. A lost pod records nothing, so its retry runs the stage (which resumes
from its scratch, or skips when it had published).

Keyed by the KFP run: submitting the same run directory again (the fix for a gate failure or a bad input) is a new
run, which runs the stage. A dot folder, as ``.locks``: no stage output, the cache and the report never list it.
Reading or writing it may fail (S3 away): a verdict that cannot be read counts as none, so the stage runs, as it
would without one; one that cannot be written costs the retries a rerun of a failure that ends the same way.
"""

from __future__ import annotations

import json
import re

from parathink import storage
from parathink.logs import log

VERDICTS = ".kfp/verdicts"
# exit 1 reaches the component's end only when its in-process retries are spent; 2 and 3 are never retried.
# Anything else (the stage killed by a signal, 130, 143) is a stop from outside: KFP's retry may run it again.
FINAL = (1, 2, 3)
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # KFP's run uuid; one path segment, never ".."


def is_final(code: int) -> bool:
    return code in FINAL


def verdict_uri(run_dir: str, run_id: str, stage: str) -> str:
    for name, value in (("run id", run_id), ("stage", stage)):
        if not _RUN_ID.fullmatch(value) or ".." in value:
            raise ValueError(f"{name} {value!r}: not one path segment")
    return storage.join(run_dir, *VERDICTS.split("/"), run_id, f"{stage}.json")


def record(run_dir: str, run_id: str, stage: str, code: int) -> None:
    """Keep ``code``, a final exit of ``stage`` in KFP run ``run_id``, for a KFP retry of the same task to find."""
    if not is_final(code):
        raise ValueError(f"exit {code} is not a final verdict (only {FINAL} are)")
    try:
        uri = verdict_uri(run_dir, run_id, stage)
        storage.write_text(uri, json.dumps({"stage": stage, "run_id": run_id, "exit": code}) + "\n")
    except (OSError, ValueError) as err:  # OSError: storage.StorageError too
        log(f"warning: could not record the verdict of {stage} (exit {code}): {err}; a KFP retry of this task "
            "will run the stage again")


def recorded(run_dir: str, run_id: str, stage: str) -> int | None:
    """The final exit code an earlier attempt of this task recorded in this KFP run, or None (run the stage)."""
    try:
        uri = verdict_uri(run_dir, run_id, stage)
        if not storage.exists(uri):
            return None
        code = json.loads(storage.read_text(uri))["exit"]
    except (OSError, ValueError, KeyError, TypeError) as err:  # OSError: storage.StorageError too
        log(f"warning: the verdict of {stage} in KFP run {run_id} is unreadable ({err}); running the stage")
        return None
    return code if isinstance(code, int) and is_final(code) else None

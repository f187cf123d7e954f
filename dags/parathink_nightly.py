"""parathink_nightly: the curriculum every night, and whenever a new data snapshot lands; nothing new, nothing trained.

Scheduled with ``CronTriggerTimetable`` (02:00 UTC; ``PARATHINK_NIGHTLY_CRON`` and ``PARATHINK_NIGHTLY_TZ`` change
it), one run at a time, no catch-up. With ``PARATHINK_NIGHTLY_DATA`` (the data location the experiment reads: a
local folder or an s3:// prefix) that location is an Airflow asset and the DAG also runs when it is updated
(``AssetOrTimeSchedule``): whoever publishes a snapshot marks the asset updated (a producing task with it in its
``outlets``, or ``POST /api/v2/assets/events``), and the run starts within the scheduler's loop.

Its first task, ``what_changed``, compares the data location's digest and the code (image digest, else git commit
and uncommitted changes) with what the last night that trained read (the Airflow Variable
``parathink_nightly_inputs``, written by the last task, ``record_inputs``, after a night that did not fail).
Unchanged: it says so in its log and skips the whole run, so no GPU is taken. Without ``PARATHINK_NIGHTLY_DATA``
every night trains: its seed (the date) draws fresh synthetic problems. Each night gets its own run directory (its
date); the runner skips the stages already up to date there, so a second run the same day reruns only what the
new snapshot feeds.
``PARATHINK_NIGHTLY_STAGES`` (comma-separated), ``PARATHINK_NIGHTLY_OVERRIDES`` (one per line) and
``PARATHINK_NIGHTLY_PROMOTE`` (true/false) set what a scheduled night runs when the deployment wants less than the
experiment's whole list. See docs/lifecycle.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from pathlib import Path

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, TriggerRule, Variable, task
from parathink_airflow.factory import curriculum_dag

log = logging.getLogger(__name__)
DATA_ENV = "PARATHINK_NIGHTLY_DATA"
STATE = "parathink_nightly_inputs"  # Airflow Variable: {"inputs": ..., "run_id": ...} of the last night that trained
CHECKOUT = Path(__file__).resolve().parent


def data_asset(uri: str) -> Asset:
    """The data location as an asset; a local folder becomes a file:// URI, the form Airflow's assets take."""
    return Asset(name="parathink_nightly_data", uri=uri if "://" in uri else Path(uri).resolve().as_uri())


def data_digest(uri: str) -> str:
    """A digest of what is at the data location: every file's path, size and mtime (local) or ETag (S3); no content
    read, so a snapshot of any size costs one listing."""
    h = hashlib.sha256()
    if uri.startswith("s3://"):
        import boto3  # the orchestrator image's (apache-airflow-providers-amazon)

        bucket, _, prefix = uri[len("s3://"):].partition("/")
        client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                h.update(f"{obj['Key']}\0{obj['Size']}\0{obj['ETag']}\n".encode())
        return h.hexdigest()[:16]
    root = Path(uri.removeprefix("file://"))
    if not root.exists():
        return "absent"
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        st = p.stat()
        h.update(f"{p.relative_to(root) if p != root else ''}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def code_identity() -> str:
    """What code a night runs. In a deployment: the image's digest (``PARATHINK_IMAGE_DIGEST``, or the reference when
    it pins one), else the digest of what the worker's image was built from (``PARATHINK_BUILD_INPUTS``, which
    images/build.sh bakes: the same source files as the trainer's). From a checkout: its commit and a digest of its
    uncommitted changes (an edit is a change worth a night's training). Else the image's tag, else unknown (always
    a change)."""
    image = os.environ.get("PARATHINK_IMAGE", "")
    for pinned in (os.environ.get("PARATHINK_IMAGE_DIGEST"), image if "@sha256:" in image else None,
                   os.environ.get("PARATHINK_BUILD_INPUTS")):
        if pinned:
            return pinned

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return image or "unknown"
    diff = git("diff", "HEAD", "--", str(CHECKOUT.parent)) or ""  # the whole checkout's, not only dags/
    return f"{head.strip()}+{hashlib.sha256(diff.encode()).hexdigest()[:12]}" if diff else head.strip()


def what_changed(**context) -> bool:
    """True (the night goes on) when the data, the code or the form changed since the last night that trained."""
    uri = os.environ.get(DATA_ENV)
    if not uri:
        log.info("no %s: every night trains (its seed, the date, draws fresh problems)", DATA_ENV)
        return True
    now = {"data": data_digest(uri), "code": code_identity(),
           "form": hashlib.sha256(json.dumps(dict(context["params"]), sort_keys=True, default=str).encode())
           .hexdigest()[:16]}
    context["ti"].xcom_push(key="inputs", value=now)
    last = Variable.get(STATE, default=None, deserialize_json=True)
    events = context.get("triggering_asset_events") or {}
    trigger = "a new data snapshot (asset event)" if events else "the schedule or a trigger"
    if last and last.get("inputs") == now:
        log.info("no new data and no code change since %s (data %s at %s, code %s): nothing to train tonight "
                 "(run started by %s)", last.get("run_id"), now["data"], uri, now["code"], trigger)
        return False
    changed = [k for k in now if not last or (last.get("inputs") or {}).get(k) != now[k]]
    log.info("changed since the last night that trained (%s): %s; data %s at %s, code %s (run started by %s)",
             (last or {}).get("run_id", "none"), ", ".join(changed), now["data"], uri, now["code"], trigger)
    return True


def record_inputs(**context) -> None:
    """After a night that did not fail: what it read, so the next night can tell whether anything is new."""
    now = context["ti"].xcom_pull(task_ids="what_changed", key="inputs")
    if now:
        Variable.set(STATE, {"inputs": now, "run_id": context["dag_run"].run_id}, serialize_json=True)
        log.info("recorded this night's inputs: %s", now)


def _schedule():
    cron = CronTriggerTimetable(os.environ.get("PARATHINK_NIGHTLY_CRON", "0 2 * * *"),
                                timezone=os.environ.get("PARATHINK_NIGHTLY_TZ", "UTC"))
    uri = os.environ.get(DATA_ENV)
    return AssetOrTimeSchedule(timetable=cron, assets=[data_asset(uri)]) if uri else cron


nightly = curriculum_dag(
    "parathink_nightly",
    schedule=_schedule(),
    nightly=True,
    doc_md=__doc__,
    dag_display_name="parathink: nightly retraining",
    description="The curriculum every night and on each new data snapshot; promotes the model when it beats the "
                "champion; trains nothing when neither the data nor the code changed",
    max_active_runs=1,
    is_paused_upon_creation=True,  # a full curriculum every night: switched on deliberately, in the UI
)
DEFAULTS = (("stages", "PARATHINK_NIGHTLY_STAGES", lambda v: [s.strip() for s in v.split(",") if s.strip()]),
            ("overrides", "PARATHINK_NIGHTLY_OVERRIDES", lambda v: [o for o in v.splitlines() if o.strip()]),
            ("promote", "PARATHINK_NIGHTLY_PROMOTE", lambda v: v.strip().lower() in ("1", "true", "yes")))
for key, env, parse in DEFAULTS:
    if os.environ.get(env):  # the scheduled night's default; every task holds its own copy of the DAG's params
        for params in [nightly.params, *(t.params for t in nightly.tasks)]:
            if key in params:
                params.get_param(key).value = parse(os.environ[env])

with nightly:
    # short_circuit skips every task after it, whatever its trigger rule: an unchanged night ends as success
    gate = task.short_circuit(task_id="what_changed", retries=0)(what_changed)()
    gate >> nightly.get_task("plan")
    record = task(task_id="record_inputs", trigger_rule=TriggerRule.NONE_FAILED, retries=0)(record_inputs)()
    nightly.get_task("promote") >> record

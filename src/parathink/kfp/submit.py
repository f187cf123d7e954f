"""``parathink kfp submit --host URL [--wait]``: the compiled pipeline sent to a Kubeflow Pipelines endpoint.

The run lands in the KFP experiment named after ``experiment_name``, under a run name with the seed and the time,
with the profile's service account, and with KFP caching off for the whole run (the run directory's manifests
decide what is up to date; docs/kubeflow.md, "Caching"). ``--wait`` follows the run to its end and exits 0 when it
succeeded, 1 otherwise (naming the failed tasks): the components and KFP have already retried what may be retried, so an
orchestrator calling this should not retry it.

``--namespace`` (the profile namespace of a multi-user KFP) and ``--token-file`` (a mounted token, e.g. the pod's
service-account token or a projected one with KFP's audience) are explicit settings, never guessed.
``--run-name NAME`` makes a submission idempotent, and ``parathink kfp status --run-name NAME`` reports the run's
state with its exit code, so an orchestrator can poll between sleeps instead of holding a worker while it waits.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from parathink.errors import ConfigError
from parathink.kfp.pipeline import compile_to
from parathink.kfp.plan import Plan

FINISHED_OK = "SUCCEEDED"
FINISHED = (FINISHED_OK, "FAILED", "ERROR", "CANCELED", "SKIPPED")  # KFP v2's terminal run states
STILL_RUNNING = 75  # `parathink kfp status`: not finished yet (EX_TEMPFAIL: ask again later)


def run_name(plan: Plan, now: float | None = None) -> str:
    return f"{plan.experiment} seed={plan.seed} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}"


def check_shared(plan: Plan) -> None:
    """A cluster's pods share no disk: the run directory must be one they all see (placement.cluster.pod_run_dir)."""
    if not plan.pods_see_run_dir:
        raise ConfigError(f"run_dir: {plan.run_dir!r} is a folder on one machine; a KFP run needs s3://... or a path "
                          "on the profile's volume (set run_dir=, or pick a cluster profile with a shared runs_root)")


def _failed_tasks(run) -> list[str]:
    details = getattr(run, "run_details", None)
    tasks = getattr(details, "task_details", None) or []
    return [t.display_name for t in tasks if str(getattr(t, "state", "")).upper() in ("FAILED", "ERROR")]


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom: the KFP API, the profile namespace of a multi-user deployment (None: single-user), and a
    token file (a projected service-account token: re-read on every refresh, so a long wait survives rotation)."""

    host: str
    namespace: str | None = None
    token_file: str | None = None

    def client(self):
        import kfp
        from kfp.client import ServiceAccountTokenVolumeCredentials

        credentials = ServiceAccountTokenVolumeCredentials(self.token_file) if self.token_file else None
        with warnings.catch_warnings():  # "This client only works with Kubeflow Pipeline v2.0.0-beta.2 and later"
            warnings.simplefilter("ignore", FutureWarning)
            return kfp.Client(host=self.host, namespace=self.namespace or "kubeflow", credentials=credentials)


def _guarded(endpoint: Endpoint, call) -> int:
    import kfp_server_api
    import urllib3

    try:
        return call()
    except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError, TimeoutError) as err:
        # The endpoint unreachable or refusing: exit 1 (a retry may succeed), one line instead of a traceback.
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"parathink: error: KFP endpoint {endpoint.host}: {first}", file=sys.stderr)
        return 1


def submit(plan: Plan, endpoint: Endpoint, *, wait: bool = False, timeout_s: float = 30 * 86400, poll_s: float = 30,
           name: str | None = None) -> int:
    """Compile ``plan``, create the run, and (``wait``) wait for it; the exit code. ``name``: the run's name, and
    a run of that name already there is not submitted again (an orchestrator's retry)."""
    check_shared(plan)
    return _guarded(endpoint, lambda: _submit(plan, endpoint, wait, timeout_s, poll_s, name))


def _find(client, endpoint: Endpoint, name: str):
    predicate = {"key": "display_name", "operation": "EQUALS", "string_value": name}
    runs = client.list_runs(namespace=endpoint.namespace, filter=json.dumps({"predicates": [predicate]})).runs
    return runs[0] if runs else None


def status(endpoint: Endpoint, name: str) -> int:
    """``parathink kfp status``: 0 the run named ``name`` succeeded, 1 it failed, 75 it is still going, 2 no such
    run. An orchestrator polls this between its own sleeps instead of holding a worker (Airflow's kubeflow sensor)."""
    def go() -> int:
        run = _find(endpoint.client(), endpoint, name)
        if run is None:
            print(f"parathink: error: no KFP run named {name!r}", file=sys.stderr)
            return 2
        return _outcome(run, STILL_RUNNING)
    return _guarded(endpoint, go)


def _submit(plan: Plan, endpoint: Endpoint, wait: bool, timeout_s: float, poll_s: float, name: str | None) -> int:
    client = endpoint.client()
    existing = _find(client, endpoint, name) if name else None
    if existing is not None:
        print(f"[parathink] KFP run {existing.run_id} ({name}) exists: not submitted again", file=sys.stderr)
        run_id = existing.run_id
    else:
        with tempfile.TemporaryDirectory() as tmp:
            package = compile_to(plan, Path(tmp) / "pipeline.yaml")
            result = client.create_run_from_pipeline_package(
                str(package), arguments={"run_dir": plan.run_dir}, run_name=name or run_name(plan),
                experiment_name=plan.experiment, namespace=endpoint.namespace, enable_caching=False,
                service_account=plan.service_account)
        run_id = result.run_id
        print(f"[parathink] KFP run {run_id} submitted (experiment {plan.experiment}, run_dir {plan.run_dir})",
              file=sys.stderr, flush=True)
    if not wait:
        return 0
    return _outcome(client.wait_for_run_completion(run_id, timeout=timeout_s, sleep_duration=poll_s), 1)


def _outcome(run, unfinished: int) -> int:
    state = str(run.state).upper()
    if state not in FINISHED:
        print(f"[parathink] KFP run {run.run_id}: {state}", file=sys.stderr)
        return unfinished
    if state == FINISHED_OK:
        print(f"[parathink] KFP run {run.run_id}: {state}", file=sys.stderr)
        return 0
    failed = _failed_tasks(run)
    where = f" at {', '.join(failed)}" if failed else ""
    print(f"parathink: error: KFP run {run.run_id} ended {state}{where}", file=sys.stderr)
    return 1

"""``parathink kfp submit --host URL [--wait]``: the compiled pipeline sent to a Kubeflow Pipelines endpoint.

The run lands in the KFP experiment named after ``experiment_name``, under a run name with the seed and the time,
with the profile's service account, and with KFP caching off for the whole run (the run directory's manifests
decide what is up to date; docs/kubeflow.md, "Caching"). ``--wait`` follows the run to its end and exits 0 when it
succeeded, 1 otherwise (naming the failed tasks): the components have already retried what may be retried, so an
orchestrator calling this should not retry it.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

from parathink.kfp.pipeline import compile_to
from parathink.kfp.plan import Plan
from parathink.errors import ConfigError

FINISHED_OK = "SUCCEEDED"


def run_name(plan: Plan, now: float | None = None) -> str:
    return f"{plan.experiment} seed={plan.seed} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}"


def check_shared(plan: Plan) -> None:
    """A cluster's pods share no disk: the run directory must be one they all see (parathink.cluster.pod_run_dir)."""
    if not plan.pods_see_run_dir:
        raise ConfigError(f"run_dir: {plan.run_dir!r} is a folder on one machine; a KFP run needs s3://... or a path "
                          "on the profile's volume (set run_dir=, or pick a cluster profile with a shared runs_root)")


def _failed_tasks(run) -> list[str]:
    details = getattr(run, "run_details", None)
    tasks = getattr(details, "task_details", None) or []
    return [t.display_name for t in tasks if str(getattr(t, "state", "")).upper() in ("FAILED", "ERROR")]


def submit(plan: Plan, host: str, *, wait: bool = False, timeout_s: float = 30 * 86400, poll_s: float = 30,
           namespace: str | None = None) -> int:
    """Compile ``plan``, create the run, and (``wait``) wait for it; the exit code."""
    import kfp_server_api
    import urllib3

    check_shared(plan)
    try:
        return _submit(plan, host, wait, timeout_s, poll_s, namespace)
    except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError, TimeoutError) as err:
        # The endpoint unreachable or refusing: exit 1 (a retry may succeed), one line instead of a traceback.
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"parathink: error: KFP endpoint {host}: {first}", file=sys.stderr)
        return 1


def _submit(plan: Plan, host: str, wait: bool, timeout_s: float, poll_s: float, namespace: str | None) -> int:
    import kfp

    with warnings.catch_warnings():  # "This client only works with Kubeflow Pipeline v2.0.0-beta.2 and later"
        warnings.simplefilter("ignore", FutureWarning)
        client = kfp.Client(host=host, namespace=namespace or "kubeflow")
    with tempfile.TemporaryDirectory() as tmp:
        package = compile_to(plan, Path(tmp) / "pipeline.yaml")
        result = client.create_run_from_pipeline_package(
            str(package), arguments={"run_dir": plan.run_dir}, run_name=run_name(plan),
            experiment_name=plan.experiment, namespace=namespace, enable_caching=False,
            service_account=plan.service_account)
    print(f"[parathink] KFP run {result.run_id} submitted (experiment {plan.experiment}, run_dir {plan.run_dir})",
          file=sys.stderr, flush=True)
    if not wait:
        return 0
    run = client.wait_for_run_completion(result.run_id, timeout=timeout_s, sleep_duration=poll_s)
    state = str(run.state).upper()
    if state == FINISHED_OK:
        print(f"[parathink] KFP run {result.run_id}: {state}", file=sys.stderr)
        return 0
    failed = _failed_tasks(run)
    where = f" at {', '.join(failed)}" if failed else ""
    print(f"parathink: error: KFP run {result.run_id} ended {state}{where}", file=sys.stderr)
    return 1

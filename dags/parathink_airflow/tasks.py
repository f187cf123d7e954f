"""The DAGs' tasks: ``plan`` first, one task per stage slot, ``kubeflow``, ``promote`` last.

Each is one ``parathink`` call and nothing else (docs/orchestration.md). Exit codes become task states:

- 0: success; the log ends with the stage's metrics line;
- 1: :class:`StageFailed`, retried by :class:`PlacementRetryPolicy` per the cluster profile's ``retries``;
- 2: bad input: fails the task, never retried;
- 3: a data-quality gate failed: fails the task with the gate's report path; downstream tasks are marked
  ``upstream_failed`` and never run (so a run whose gates failed is never promoted).
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import SkipMixin, Variable, get_current_context
from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException, AirflowTaskTimeout

from parathink_airflow import local
from parathink_airflow.chain import SLOTS, ChainError, assign
from parathink_airflow.form import (
    Form,
    FormError,
    arguments,
    check_for_pods,
    check_retries,
    check_timeouts,
    default_run_dir,
    deployment_overrides,
    run_name,
)

log = logging.getLogger(__name__)

# Airflow fixes a task's retry ceiling at parse time; the cluster profile's count decides below it.
MAX_RETRIES = int(os.environ.get("PARATHINK_MAX_RETRIES", "5"))
# Every stage task's execution_timeout, fixed at parse time: above every stage's own timeout_s (the pod's deadline),
# so it fires only for what the pod's cannot stop (a lost worker, a local stage). 4 days by default.
MAX_TIMEOUT_S = int(os.environ.get("PARATHINK_MAX_TIMEOUT_S", str(4 * 86400)))
KFP_HOST_VARIABLE = "parathink_kfp_host"
KFP_NO_SUCH_RUN, KFP_STILL_RUNNING = 2, 75  # `parathink kfp status` exit codes (parathink.kfp.submit)
KFP_POKE_S = 300  # a pipeline runs for hours or days: its state read every 5 minutes


class StageFailed(AirflowException):
    """Exit code 1 (or any code but 0, 2, 3): retried as the stage's placement says."""

    def __init__(self, message: str, retries: int, backoff_s: int):
        super().__init__(message)
        self.retries, self.backoff_s = retries, backoff_s


class PlacementRetryPolicy(RetryPolicy):
    """Retries a :class:`StageFailed` ``retries`` times, ``backoff_s`` apart; never a task past its execution_timeout;
    anything else as Airflow would."""

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context=None) -> RetryDecision:
        if isinstance(exception, AirflowTaskTimeout):  # a stage past the ceiling would pass it again, GPUs and all
            return RetryDecision.fail("the task ran past its execution_timeout (PARATHINK_MAX_TIMEOUT_S); not retried")
        if not isinstance(exception, StageFailed):
            return RetryDecision.default()
        if try_number > exception.retries:
            return RetryDecision.fail(f"failed {try_number} time(s); the cluster profile allows "
                                      f"{exception.retries} retries")
        return RetryDecision.retry(timedelta(seconds=exception.backoff_s),
                                   f"retry {try_number} of {exception.retries} in {exception.backoff_s} s")

    def serialize(self) -> dict[str, Any]:
        return {"__type": type(self).__name__}


# ---------------------------------------------------------------- plan

def plan(dated_runs: bool) -> dict:
    """Read the form, run ``parathink plan`` (the whole config validated in seconds), assign stages to tasks.

    Returns what every later task reads (XCom): executor, run directory, stages, their task slots and
    placements, and the arguments each ``parathink`` call gets.
    """
    ctx = get_current_context()
    dag_run = ctx["dag_run"]
    when: datetime = dag_run.logical_date or dag_run.run_after
    try:
        form = Form.read(ctx["params"])
        run = _plan(form, ctx["dag"].dag_id, when.strftime("%Y-%m-%d") if dated_runs else run_name(dag_run.run_id),
                    form.seed if form.seed is not None else int(when.strftime("%Y%m%d")))
    except (FormError, ChainError, local.PlanRefused, local.CommandMissing, local.SettingError) as err:
        raise AirflowFailException(str(err)) from None
    run["kfp_run_name"] = f"{ctx['dag'].dag_id} {run_name(dag_run.run_id)}"  # one KFP run per DAG run, for every poke
    log.info("run directory %s, executor %s, stages %s%s", run["run_dir"], run["executor"],
             " -> ".join(run["stages"]) or "(none)", " -> promote" if run["promote"] else "")
    _skip_unused(ctx, run)
    return run


def _skip_unused(ctx, run: Mapping[str, Any]) -> None:
    """Mark the tasks this run does not use as skipped now, before a worker starts for each of them.

    Skipping ends this task, before Airflow pushes its return value, so the plan is pushed here. Each of those
    tasks also checks the plan itself, so a cleared and re-run one skips too. ``promote`` is never skipped here:
    as the DAG's only leaf it must see a failure upstream (it skips itself when the form says no).
    """
    unused = [slot for slot, _ in SLOTS if run["executor"] == "kfp" or slot not in run["slots"]]
    unused += [] if run["executor"] == "kfp" else ["kubeflow"]
    ctx["ti"].xcom_push(key="return_value", value=run)
    if unused:
        log.info("not used by this run: %s", ", ".join(unused))
        SkipMixin().skip(ctx["ti"], [ctx["ti"].task.dag.get_task(task_id) for task_id in unused])


def _plan(form: Form, dag_id: str, name: str, seed: int) -> dict:
    where = local.plan_in(os.environ)  # the worker's parathink, or a pod of the trainer image where it has none
    if where == "pod" and form.executor != "kubernetes":
        why = "this worker has no parathink" if local.find_command() is None else f"{local.PLAN_IN_ENV}=pod"
        raise FormError(f"executor={form.executor}: its tasks run parathink on this Airflow worker, but the plan runs "
                        f"in a pod ({why}); use executor=kubernetes")
    tracking_uri = os.environ.get("PARATHINK_TRACKING_URI") if form.executor == "local" else None
    deployment = deployment_overrides(os.environ)

    def plan_for(run_dir: str, stages) -> dict:
        args = arguments(form.experiment, run_dir=run_dir, seed=seed, stages=stages, overrides=form.overrides,
                         tracking_uri=tracking_uri, deployment=deployment)
        mine = len(args) - len(form.overrides)  # the user's overrides come last: held to the form's allowlist
        return _run_plan([*args[:mine], "--form", *args[mine:]], where)

    doc = plan_for(form.run_dir or default_run_dir(dag_id, name), list(form.stages) or None)
    stages = [s for s in doc["stages"] if s != "promote"]
    run_dir = str(doc["run_dir"])
    if form.executor == "local" and "://" not in run_dir:
        run_dir = str(local.workdir() / run_dir)  # every task, and the log, see the same absolute path
    elif form.executor != "local":  # where every pod sees it (a relative run_dir moved under a shared runs_root)
        run_dir = doc["pod_run_dir"] or run_dir  # null: no pod can see it, which _check_executor refuses
    if form.promote:  # promote's own checks (tracking.backend=mlflow) and placement
        doc = plan_for(run_dir, [*stages, "promote"])
    slots = assign(stages)
    _check_executor(form.executor, doc)
    args = arguments(form.experiment, run_dir=run_dir, seed=seed, stages=None, overrides=form.overrides,
                     tracking_uri=tracking_uri, deployment=deployment)
    return {"executor": form.executor, "run_dir": run_dir, "stages": stages, "promote": form.promote,
            "slots": slots, "placement": doc["placement"], "pods": doc["pods"], "args": args}


def _run_plan(args: list[str], where: str) -> dict:
    """``parathink plan ARGS`` on this worker or in a pod (pods.plan_in_pod): the same arguments, the same document,
    the same one-line PlanRefused."""
    if where == "worker":
        return local.plan(args)
    from parathink_airflow import pods

    return pods.plan_in_pod(args, get_current_context(), os.environ, log.info,
                            started=lambda operator: _kill_with(lambda: pods.stop(operator)))


def _check_executor(executor: str, doc: Mapping[str, Any]) -> None:
    """What the executor needs beyond a valid config (FormError otherwise)."""
    check_timeouts(doc, MAX_TIMEOUT_S)
    runtime = doc.get("runtime", {})
    if executor == "local":
        if not runtime.get("torch", True):
            raise FormError("executor=local: this worker's parathink has no torch (an orchestrator image plans "
                            "only); use executor=kubernetes or kfp, or set PARATHINK_DEFAULT_EXECUTOR")
        check_retries(doc, MAX_RETRIES)
        return
    # kfp: the stages run inside Kubeflow; only promote is a pod of this DAG's own.
    mine = doc if executor == "kubernetes" else {**doc, "placement": {
        k: v for k, v in doc["placement"].items() if k == "promote"}}
    check_for_pods(mine, MAX_RETRIES)
    if executor == "kfp":
        if not runtime.get("kfp", True):
            raise FormError("executor=kfp: this worker's parathink has no kfp (pip install 'parathink[kfp]' in "
                            "the orchestrator image); use executor=kubernetes")
        kfp_host()


def kfp_host() -> str:
    host = Variable.get(KFP_HOST_VARIABLE, default=None) or os.environ.get("PARATHINK_KFP_HOST")
    if not host:
        raise FormError(f"executor=kfp: no Kubeflow Pipelines endpoint; set the Airflow Variable "
                        f"{KFP_HOST_VARIABLE} (or PARATHINK_KFP_HOST)")
    return host


# ---------------------------------------------------------------- stages

def stage(run: Mapping[str, Any], slot: str) -> None:
    """The stage the plan put in this slot, or a skip that lets the chain go on."""
    name = run["slots"].get(slot)
    if run["executor"] == "kfp":
        raise AirflowSkipException("executor=kfp: the stages run as one Kubeflow pipeline (task kubeflow)")
    if name is None:
        raise AirflowSkipException(f"{slot}: not one of this run's stages")
    _call(name, run, in_pod=run["executor"] == "kubernetes")


def kubeflow(run: Mapping[str, Any]) -> bool:
    """``executor=kfp``: the run's stages as one Kubeflow pipeline, followed without holding a worker.

    A sensor in reschedule mode (the factory): each poke is one short ``parathink kfp status`` call; the first one
    finds no run of this DAG run's name and submits it (``parathink kfp submit --run-name``, which a retry cannot
    submit twice). Between pokes the task gives its worker slot back. True ends the wait; a failed pipeline fails.
    """
    if run["executor"] != "kfp":
        raise AirflowSkipException(f"executor={run['executor']}: the stages ran as their own tasks")
    endpoint = ["--host", kfp_host(), *kfp_auth(), "--run-name", run["kfp_run_name"]]
    done = _local(["kfp", "status", *endpoint])
    if done.code == KFP_NO_SUCH_RUN:
        done = _local(["kfp", "submit", *endpoint, f"stages=[{','.join(run['stages'])}]", *run["args"]])
        _raise_for_exit("kubeflow", done.code, done.last(), {"retries": 0, "retry_backoff_s": 0})
        return False
    if done.code == KFP_STILL_RUNNING:
        return False
    _raise_for_exit("kubeflow", done.code, done.last(), {"retries": 0, "retry_backoff_s": 0})
    return True


def kfp_auth() -> list[str]:
    """The KFP profile namespace and token file of this deployment (Airflow Variables or the environment)."""
    out = []
    for flag, variable, env in (("--namespace", "parathink_kfp_namespace", "PARATHINK_KFP_NAMESPACE"),
                                ("--token-file", "parathink_kfp_token_file", "PARATHINK_KFP_TOKEN_FILE")):
        value = Variable.get(variable, default=None) or os.environ.get(env)
        out += [flag, value] if value else []
    return out


def promote(run: Mapping[str, Any]) -> None:
    """``parathink stage promote``: moves ``champion`` only when this run's best model wins (it says why)."""
    if not run["promote"]:
        raise AirflowSkipException("promote is off in the form: the registry's champion is left where it is")
    _call("promote", run, in_pod=run["executor"] != "local")


def _call(name: str, run: Mapping[str, Any], in_pod: bool) -> None:
    placement = run["placement"][name]
    argv = ["stage", name, f"stages=[{','.join(run['stages'] + (['promote'] if run['promote'] else []))}]",
            *run["args"]]
    if in_pod:
        from parathink_airflow import pods

        context = get_current_context()
        operator = pods.stage_pod(run["pods"][name], placement, argv, task_id=f"{name}-pod")
        _kill_with(lambda: pods.stop(operator))  # deletes the stage's pod
        code = pods.run(operator, context)
        detail = "the pod's log above has the details" if code else ""
    else:
        done = _local(argv)
        code, detail = done.code, done.last()
    _raise_for_exit(name, code, detail, placement)  # its metrics end the stage's own log, on its done line


def _local(argv: list[str]) -> local.Finished:
    log.info("$ parathink %s", shlex.join(argv))  # the same call, to reproduce it from a shell
    try:
        return local.stream(argv, log.info, started=lambda proc: _kill_with(lambda: local.stop(proc)))
    except local.CommandMissing as err:
        raise AirflowFailException(str(err)) from None


def _kill_with(stop) -> None:
    """Make this task's ``on_kill`` stop what it started.

    Airflow calls the running task's ``on_kill`` when the task is stopped (marked failed or cleared: SIGTERM) and
    when ``execution_timeout`` fires; the decorated task's own is a no-op, and the operator or process the task
    started inside itself is invisible to Airflow. Without this, a stopped task leaves its stage pod (GPUs and all)
    or its ``parathink`` process running.
    """
    get_current_context()["ti"].task.on_kill = stop


def _raise_for_exit(name: str, code: int, detail: str, placement: Mapping[str, Any]) -> None:
    if code == 0:
        return
    if code == 2:
        raise AirflowFailException(f"{name}: bad input, not retried (exit 2): {detail}")
    if code == 3:
        raise AirflowFailException(f"{name}: a data-quality gate failed; nothing after it runs (exit 3): {detail}")
    raise StageFailed(f"{name}: exit code {code}: {detail}", placement["retries"], placement["retry_backoff_s"])

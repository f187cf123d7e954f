"""What the DAG tests ask of Airflow itself, run with the Airflow venv's python (the test venv has no Airflow).

    python in_airflow.py dagbag                       # the DAG folder parsed as the dag-processor parses it
    python in_airflow.py dag-test RUNS.json           # one dag.test() per {dag_id, conf} in the file
    python in_airflow.py pods PLAN.json...            # each stage's pod request and operator settings
    python in_airflow.py plan CASES.json              # the plan task's _plan per case, its pod run by a stand-in

Prints one JSON line after the marker ``@@result``; the tests assert on it. The environment names AIRFLOW_HOME
(a migrated database) and AIRFLOW__CORE__DAGS_FOLDER.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

MARKER = "@@result"
HEAVY = ("torch", "transformers", "parathink", "airflow.providers.cncf.kubernetes.operators.pod")


def _bag():
    from airflow.configuration import conf
    from airflow.dag_processing.dagbag import BundleDagBag

    folder = Path(conf.get("core", "dags_folder"))
    started = time.perf_counter()
    bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
    return bag, time.perf_counter() - started


def dagbag() -> dict:
    from airflow.sdk.definitions.param import ParamsDict

    bag, seconds = _bag()
    dags = {}
    for dag_id, dag in bag.dags.items():
        params = ParamsDict(dag.params)
        dags[dag_id] = {
            "tasks": [t.task_id for t in dag.topological_sort()],
            "trigger_rules": {t.task_id: getattr(t.trigger_rule, "value", t.trigger_rule) for t in dag.tasks},
            "params": params.validate(),
            "schema": {k: {**params.get_param(k).schema, "description": params.get_param(k).description}
                       for k in params},
            "timetable": f"{type(dag.timetable).__name__} {dag.timetable!r}",
            "max_active_runs": dag.max_active_runs,
            "execution_timeouts": {t.task_id: t.execution_timeout.total_seconds() if t.execution_timeout else None
                                   for t in dag.tasks},
            "catchup": dag.catchup,
            "upstream": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks},
            "pools": {t.task_id: [t.pool, t.pool_slots] for t in dag.tasks},
            "access_control": {role: {k: sorted(v) for k, v in perms.items()}
                               for role, perms in (dag.access_control or {}).items()},
        }
    return {"import_errors": bag.import_errors, "parse_s": seconds, "dags": dags,
            "heavy_modules": [m for m in HEAVY if m in sys.modules]}


def dag_test(runs_file: str) -> list[dict]:
    """Each run's state and task states, or ``refused`` when Airflow rejects its conf (as a trigger would)."""
    from airflow.sdk.exceptions import ParamValidationError

    bag, _ = _bag()
    out = []
    for spec in json.loads(Path(runs_file).read_text()):
        started = time.perf_counter()
        try:
            run = bag.dags[spec["dag_id"]].test(run_conf=spec["conf"])
        except ParamValidationError as err:
            out.append({"refused": str(err)})
            continue
        tis = {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number} for ti in run.get_task_instances()}
        out.append({"state": str(run.state), "tasks": tis, "seconds": time.perf_counter() - started,
                    "plan": _plan_xcom(run)})
    return out


def _plan_xcom(run):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids="plan",
                                                 key="return_value")).first()
        return XComModel.deserialize_value(row) if row is not None else None


def pods(plan_files: list[str]) -> dict:
    """Per plan file and stage: the pod request the DAG would send and the operator's other settings."""
    sys.path.insert(0, os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    sys.path.insert(0, str(Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).parent / "tools"))
    import stage_pod
    from parathink_airflow import pods as stage_pods

    out = {}
    for plan_file in plan_files:
        plan = json.loads(Path(plan_file).read_text())
        out[Path(plan_file).stem] = mine = {}
        for stage, placement in plan["placement"].items():
            op = stage_pods.stage_pod(plan["pods"][stage], placement, stage_pod.plan_argv(plan, stage, []))
            mine[stage] = {"request": stage_pods.pod_request(op), "operator": {
                "on_finish_action": op.on_finish_action.value, "startup_timeout_seconds": op.startup_timeout_seconds,
                "get_logs": op.get_logs, "log_pod_spec_on_failure": op.log_pod_spec_on_failure}}
    return out


def plan(cases_file: str) -> list[dict]:
    """``tasks._plan`` of each case ``{params, env}`` (the form's params, the worker's environment), as the plan task
    calls it; what it returned or the one line it failed with, the worker's ``parathink plan`` calls and the plan
    pods' requests.

    STAND-IN: no cluster here. ``pods.run`` is replaced by a stand-in kubelet that runs the operator's container
    as fake_kubelet.py (tests/deploy) does: its command (``parathink ...``, from the pod request the operator would
    send) as a process of this machine, with only the pod's environment (plus PATH, HOME and PYTHONPATH: the
    "image"), its stdout and stderr as the pod's log, handed to the operator's callbacks as the provider hands a
    finished pod, and its exit code returned. Everything else (decision, pod template, operator, log parsing, the
    errors) is the DAG's own code.
    """
    import subprocess
    import tempfile
    from types import SimpleNamespace

    sys.path.insert(0, os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    from parathink_airflow import local, pods, tasks
    from parathink_airflow.form import Form

    worker_calls, pod_requests = [], []
    real_local_plan = local.plan
    parathink = os.environ["PARATHINK_BIN"]  # the "image's" parathink, whatever a case does to the worker's
    image_env = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH") if k in os.environ}

    def local_plan(args):
        worker_calls.append(list(args))
        return real_local_plan(args)

    def stand_in_run(operator, context):
        request = pods.pod_request(operator)
        pod_requests.append(request)
        (container,) = request["spec"]["containers"]
        argv = [*container.get("command", []), *container.get("args", [])]
        assert argv[0] == "parathink", argv
        env = {**image_env, "CI": "true", **{e["name"]: e["value"] for e in container.get("env", [])}}
        with tempfile.TemporaryDirectory(prefix="stand-in-kubelet-") as cwd:
            proc = subprocess.run([parathink, *argv[1:]], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=300)
        log = proc.stdout + proc.stderr
        # as the Kubernetes client answers with _preload_content=False: the raw response
        client = SimpleNamespace(read_namespaced_pod_log=lambda name, namespace, container, _preload_content: (
            SimpleNamespace(data=log.encode())))
        finished = SimpleNamespace(metadata=SimpleNamespace(name=request["metadata"]["name"],
                                                            namespace=request["metadata"]["namespace"]))
        for callback in operator.callbacks:
            callback.on_pod_completion(pod=finished, client=client, mode="sync", operator=operator, context=context)
        return proc.returncode

    ti = SimpleNamespace(task=SimpleNamespace(on_kill=None))
    tasks.get_current_context = lambda: {"ti": ti}
    local.plan, pods.run = local_plan, stand_in_run
    out = []
    saved = dict(os.environ)
    for case in json.loads(Path(cases_file).read_text()):
        worker_calls.clear()
        pod_requests.clear()
        ti.task.on_kill = None
        os.environ.clear()
        os.environ.update({k: v for k, v in saved.items() if k not in case.get("unset", [])}, **case["env"])
        try:
            result = {"plan": tasks._plan(Form.read(case["params"]), "parathink_curriculum", "case", 7)}
        except Exception as err:  # what the plan task turns into its one-line failure
            result = {"error": f"{type(err).__name__}: {err}"}
        finally:
            os.environ.clear()
            os.environ.update(saved)
        out.append({**result, "worker_calls": list(worker_calls), "pod_requests": list(pod_requests),
                    "on_kill": ti.task.on_kill is not None})
    return out


def main(argv: list[str]) -> int:
    if argv[0] == "dagbag":
        result = dagbag()
    elif argv[0] == "dag-test":
        result = dag_test(argv[1])
    elif argv[0] == "pods":
        result = pods(argv[1:])
    elif argv[0] == "plan":
        result = plan(argv[1])
    else:
        print(f"in_airflow.py: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    print(MARKER + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

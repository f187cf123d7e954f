"""One parathink stage as the DAG's Kubernetes pod, from the command line: no DAG, no Airflow database.

    python tools/stage_pod.py request --plan plan.json --stage sft [-- OVERRIDE ...]
    python tools/stage_pod.py run --plan plan.json --stage teacher --kubeconfig KUBECONFIG \\
        [--context NAME] [--no-logs] [-- OVERRIDE ...]
    python tools/stage_pod.py plan --kubeconfig KUBECONFIG [--context NAME] -- PLAN_ARGUMENT ...

Run it with the Airflow venv's python (``.venv-airflow``: the cncf-kubernetes provider). ``plan.json`` is
``parathink plan [overrides] > plan.json``. ``request`` prints the pod the DAG would create
(``build_pod_request_obj()`` as the Kubernetes API's JSON); ``run`` creates it with the DAG's own operator
(``dags/parathink_airflow/pods.py``), waits, deletes it on success and exits with the stage's exit code. A
developer's and operator's tool: it lives outside ``dags/``, which ships into the scheduler's DAG folder.

``plan`` runs ``parathink plan PLAN_ARGUMENT...`` in the pod an Airflow worker without parathink plans in
(``pods.plan_in_pod``: the trainer image of ``PARATHINK_IMAGE``, in ``PARATHINK_NAMESPACE``, ...) and prints its
document, or exits with the plan's code and its one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dags"))  # the DAGs' package, as the scheduler has it

from parathink_airflow.form import arguments
from parathink_airflow.local import PlanRefused, SettingError
from parathink_airflow.pods import plan_in_pod, pod_request, run, stage_pod


def _standalone_context(stage: str) -> dict:
    """What the operator reads from an Airflow context, for a run outside Airflow (pod labels, no XCom)."""
    run_id = f"cli-{time.strftime('%Y%m%dT%H%M%S')}"
    ti = SimpleNamespace(dag_id="parathink_cli", task_id=f"stage-{stage}", map_index=-1, try_number=1,
                         xcom_push=lambda **_: None)
    return {"ti": ti, "run_id": run_id, "dag": SimpleNamespace()}


def plan_argv(plan: Mapping[str, Any], stage: str, extra: Sequence[str]) -> list[str]:
    """``stage NAME`` and the run's arguments as the DAG passes them, from a ``parathink plan`` document."""
    args = arguments(plan["experiment"], run_dir=plan["run_dir"], seed=plan["seed"], stages=plan["stages"],
                     overrides=extra)
    return ["stage", stage, *args]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="stage_pod.py", description="One parathink stage as the DAG's Kubernetes pod.")
    p.add_argument("action", choices=("request", "run", "plan"))
    p.add_argument("--plan", help="request, run: the JSON that `parathink plan [overrides]` printed")
    p.add_argument("--stage", help="request, run: the stage")
    p.add_argument("--kubeconfig", help="run: the cluster's kubeconfig")
    p.add_argument("--context", help="run: a context of the kubeconfig")
    p.add_argument("--no-logs", action="store_true", help="run: do not follow the pod's log")
    p.epilog = "Extra Hydra overrides for the stage follow --."
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, overrides = p.parse_args(argv[:split]), argv[split + 1:]
    if args.action == "plan":
        return _plan(args, overrides)
    if not args.plan or not args.stage:
        p.error(f"{args.action} needs --plan and --stage")
    try:
        plan = json.loads(Path(args.plan).read_text(encoding="utf-8"))
        placement, pod = plan["placement"][args.stage], plan["pods"][args.stage]
    except (OSError, ValueError) as err:
        print(f"stage_pod.py: error: --plan {args.plan}: {err}", file=sys.stderr)
        return 2
    except KeyError:
        print(f"stage_pod.py: error: --stage {args.stage}: not in the plan's stages {plan.get('stages')}",
              file=sys.stderr)
        return 2
    if args.action == "run" and not args.kubeconfig:
        print("stage_pod.py: error: run needs --kubeconfig", file=sys.stderr)
        return 2
    with _stdout_to_stderr():  # Airflow logs to stdout; stdout is the pod's JSON
        operator = stage_pod(pod, placement, plan_argv(plan, args.stage, overrides), get_logs=not args.no_logs,
                             kubeconfig=args.kubeconfig, context=args.context, conn_id=None)
        if args.action == "run":
            return run(operator, _standalone_context(args.stage))
        request = pod_request(operator)
    print(json.dumps(request, indent=1, sort_keys=True))
    return 0


def _plan(args: argparse.Namespace, plan_args: Sequence[str]) -> int:
    """``parathink plan PLAN_ARGS`` in the DAG's plan pod; its document on stdout."""
    if not args.kubeconfig:
        print("stage_pod.py: error: plan needs --kubeconfig", file=sys.stderr)
        return 2
    with _stdout_to_stderr():
        try:
            doc = plan_in_pod(plan_args, _standalone_context("plan"), os.environ,
                              lambda line: print(line, file=sys.stderr),
                              kubeconfig=args.kubeconfig, context=args.context, conn_id=None)
        except (PlanRefused, SettingError) as err:
            print(err, file=sys.stderr)
            return getattr(err, "code", 2)
    print(json.dumps(doc, indent=1))
    return 0


@contextlib.contextmanager
def _stdout_to_stderr():
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    sys.exit(main())

"""One curriculum stage as a ``KubernetesPodOperator`` pod: the Pod ``parathink plan`` rendered for it.

The pod is not decided here. ``parathink plan`` prints each stage's Pod (``pods``, rendered by parathink.podspec
from ``hydra_conf/cluster/*.yaml``: image, resources, GPU pool, /dev/shm, env and env from Secrets by reference,
the PVC, labels, the restricted security context) and the operator takes it as its pod template, adding only the
command, Airflow's own labels and a name suffix. Succeeded pods are deleted; failed ones are kept for
``kubectl logs``.

From the command line (the Airflow venv's python; no DAG, no Airflow database)::

    python dags/parathink_airflow/pods.py request --plan plan.json --stage sft [-- OVERRIDE ...]
    python dags/parathink_airflow/pods.py run --plan plan.json --stage teacher --kubeconfig KUBECONFIG \\
        [--context NAME] [--no-logs] [-- OVERRIDE ...]

``plan.json`` is ``parathink plan [overrides] > plan.json``. ``request`` prints the pod the DAG would create
(``build_pod_request_obj()`` as the Kubernetes API's JSON); ``run`` creates it, waits, deletes it on success and
exits with the stage's exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a script: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parathink_airflow.form import arguments


def stage_pod(pod: Mapping[str, Any], placement: Mapping[str, Any], argv: Sequence[str], *,
              task_id: str | None = None, get_logs: bool = True, kubeconfig: str | None = None,
              context: str | None = None, conn_id: str | None = "kubernetes_default"):
    """The ``KubernetesPodOperator`` that runs ``parathink ARGV...`` in ``pod``, the stage's Pod as ``parathink plan``
    rendered it (``pods``: parathink.podspec); the operator only adds the command, its labels and a name suffix.

    ``placement`` gives what is the operator's own (the start-up timeout). ``argv`` starts with ``stage NAME``.
    ``kubeconfig``/``context`` (and ``conn_id=None``) point it at a cluster outside Airflow's connections, as the
    command line does.
    """
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    (container,) = pod["spec"]["containers"]
    return KubernetesPodOperator(
        task_id=task_id or f"parathink-{placement['stage']}",
        pod_template_dict=dict(pod),
        base_container_name=container["name"],  # the container whose log is followed and exit code read
        cmds=["parathink"],
        arguments=list(argv),
        startup_timeout_seconds=placement["startup_timeout_s"],
        on_finish_action="delete_succeeded_pod",
        get_logs=get_logs,
        log_pod_spec_on_failure=False,  # the spec is in the plan; the failure message stays one screen
        kubernetes_conn_id=conn_id,
        config_file=kubeconfig,
        cluster_context=context,
        in_cluster=False if kubeconfig else None,
    )


def pod_request(operator) -> dict:
    """The pod the operator would create, as the Kubernetes API's JSON (no cluster needed)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(operator.build_pod_request_obj(dry_run=True))


def exit_code(remote_pod, container: str) -> int | None:
    """The stage container's exit code in a finished pod (None when it never ran)."""
    statuses = (remote_pod.status.container_statuses or []) if remote_pod and remote_pod.status else []
    for status in statuses:
        if status.name == container and status.state and status.state.terminated:
            return status.state.terminated.exit_code
    return None


def run(operator, context: Mapping[str, Any]) -> int:
    """Create the pod, wait for it, return the stage's exit code (0, 1, 2 or 3)."""
    try:
        operator.execute(context)
        return 0
    except Exception:
        code = exit_code(operator.remote_pod, operator.base_container_name)
        if not code:  # the pod never finished the stage (API error, start-up or execution timeout): Airflow's
            operator.on_kill()  # retries apply, and this pod must not go on running (or pending) beside the next
            raise
        return code


STOP_WAIT_S = 4.0  # Airflow 3's supervisor sends SIGKILL 5 s after the SIGTERM whose handler calls stop()


def stop(operator, say=lambda line: os.write(2, (line + "\n").encode())) -> None:
    """Delete the operator's pod now: the task was stopped (marked failed, cleared, timed out) while it ran.

    Called from the task's SIGTERM handler, which runs in the main thread wherever that thread was interrupted,
    possibly inside the operator's own Kubernetes client (its connection pool's lock held, a log stream half
    read). So the delete runs in a thread of its own, through a client of its own, and the handler waits for it
    at most ``STOP_WAIT_S``. ``say`` reports on stderr with raw writes: a logging lock held by the interrupted
    thread must not block the handler. The stage in the pod stops on the kubelet's SIGTERM (parathink exits 143).
    """
    pod = operator.pod
    if pod is None:
        say("parathink: stopping: the stage's pod was not created yet; nothing to delete")
        return
    name, namespace = pod.metadata.name, pod.metadata.namespace
    done, started = threading.Event(), time.monotonic()

    def delete() -> None:
        from kubernetes import client

        try:
            api = client.CoreV1Api(operator.hook.get_conn())
            grace = {"grace_period_seconds": operator.termination_grace_period} \
                if operator.termination_grace_period is not None else {}
            api.delete_namespaced_pod(name, namespace, **grace)
            say(f"parathink: stopping: pod {name} deleted ({time.monotonic() - started:.1f} s)")
        except client.ApiException as err:
            say(f"parathink: stopping: pod {name} already gone" if err.status == 404 else
                f"parathink: stopping: could not delete pod {name}: {err.status} {err.reason}; delete it with "
                f"kubectl -n {namespace} delete pod {name}")
        except Exception as err:  # a thread of a signal handler: report, never raise
            say(f"parathink: stopping: could not delete pod {name}: {type(err).__name__}: {err}")
        finally:
            done.set()

    say(f"parathink: stopping: deleting the stage's pod {name}")
    threading.Thread(target=delete, name="parathink-stop-pod", daemon=True).start()
    if not done.wait(STOP_WAIT_S):
        say(f"parathink: stopping: pod {name}: no answer to the delete after {STOP_WAIT_S:.0f} s")


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
    p = argparse.ArgumentParser(prog="pods.py", description="One parathink stage as the DAG's Kubernetes pod.")
    p.add_argument("action", choices=("request", "run"))
    p.add_argument("--plan", required=True, help="the JSON that `parathink plan [overrides]` printed")
    p.add_argument("--stage", required=True)
    p.add_argument("--kubeconfig", help="run: the cluster's kubeconfig")
    p.add_argument("--context", help="run: a context of the kubeconfig")
    p.add_argument("--no-logs", action="store_true", help="run: do not follow the pod's log")
    p.epilog = "Extra Hydra overrides for the stage follow --."
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, overrides = p.parse_args(argv[:split]), argv[split + 1:]
    try:
        plan = json.loads(Path(args.plan).read_text(encoding="utf-8"))
        placement, pod = plan["placement"][args.stage], plan["pods"][args.stage]
    except (OSError, ValueError) as err:
        print(f"pods.py: error: --plan {args.plan}: {err}", file=sys.stderr)
        return 2
    except KeyError:
        print(f"pods.py: error: --stage {args.stage}: not in the plan's stages {plan.get('stages')}", file=sys.stderr)
        return 2
    if args.action == "run" and not args.kubeconfig:
        print("pods.py: error: run needs --kubeconfig", file=sys.stderr)
        return 2
    with _stdout_to_stderr():  # Airflow logs to stdout; stdout is the pod's JSON
        operator = stage_pod(pod, placement, plan_argv(plan, args.stage, overrides), get_logs=not args.no_logs,
                             kubeconfig=args.kubeconfig, context=args.context, conn_id=None)
        if args.action == "run":
            return run(operator, _standalone_context(args.stage))
        request = pod_request(operator)
    print(json.dumps(request, indent=1, sort_keys=True))
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

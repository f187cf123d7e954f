"""One curriculum stage as a ``KubernetesPodOperator`` pod: the Pod ``parathink plan`` rendered for it.

The pod is not decided here. ``parathink plan`` prints each stage's Pod (``pods``, rendered by placement.podspec
from ``hydra_conf/cluster/*.yaml``: image, resources, GPU pool, /dev/shm, env and env from Secrets by reference,
the PVC, labels, the restricted security context) and the operator takes it as its pod template, adding only the
command, Airflow's own labels and a name suffix. Succeeded pods are deleted; failed ones are kept for
``kubectl logs``.

``tools/stage_pod.py`` runs the same operator from the command line, outside Airflow.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any


def stage_pod(pod: Mapping[str, Any], placement: Mapping[str, Any], argv: Sequence[str], *,
              task_id: str | None = None, get_logs: bool = True, kubeconfig: str | None = None,
              context: str | None = None, conn_id: str | None = "kubernetes_default"):
    """The ``KubernetesPodOperator`` that runs ``parathink ARGV...`` in ``pod``, the stage's Pod as ``parathink plan``
    rendered it (``pods``: placement.podspec); the operator only adds the command, its labels and a name suffix.

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
        # `parathink stage NAME`, not torchrun: that process starts its placement's launch (one rank per GPU of
        # this pod, parathink.launch) and exits with the ranks' own code, which run() reads (torchrun's is always 1).
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

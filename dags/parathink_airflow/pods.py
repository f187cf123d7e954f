"""One curriculum stage as a ``KubernetesPodOperator`` pod: the Pod ``parathink plan`` rendered for it.

The pod is not decided here. ``parathink plan`` prints each stage's Pod (``pods``, rendered by placement.podspec
from ``hydra_conf/cluster/*.yaml``: image, resources, GPU pool, /dev/shm, env and env from Secrets by reference,
the PVC, labels, the restricted security context) and the operator takes it as its pod template, adding only the
command, Airflow's own labels and a name suffix. Succeeded pods are deleted; failed ones are kept for
``kubectl logs``.

An Airflow worker without ``parathink`` runs ``parathink plan`` the same way (:func:`plan_in_pod`): a small pod of
the trainer image built here from the deployment's environment (the plan has not run yet, so no rendered Pod
exists), whose log holds the plan document.

``tools/stage_pod.py`` runs the same operators from the command line, outside Airflow.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parathink_airflow.form import DEPLOYMENT_KEYS
from parathink_airflow.local import PlanRefused, SettingError, refused

# ---------------------------------------------------------------- the plan's pod
# What the plan pod needs of the deployment and where it gets it; unset, the packaged profiles' values
# (hydra_conf/cluster/*.yaml: namespace, service_account; tests/dags/test_plan_pod.py keeps them equal).
PLAN_IMAGE_ENVS = ("PARATHINK_PLAN_IMAGE", "PARATHINK_IMAGE")  # the first set wins
DEFAULT_NAMESPACE, DEFAULT_SERVICE_ACCOUNT = "parathink", "parathink-runner"
PLAN_UID = 1000  # the trainer image's USER (images/trainer/Dockerfile)
# `parathink plan` composes and validates in about a second and 50 MB; the image pull is what takes time. Both
# bounds end before the plan task's own execution_timeout (factory.PLAN_TIMEOUT, 10 minutes), so the pod says why.
PLAN_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
PLAN_STARTUP_TIMEOUT_S = 420  # scheduled and the image pulled
PLAN_DEADLINE_S = 540  # activeDeadlineSeconds: the pod's whole life, its pull included
# What the plan reads from its environment besides its arguments (parathink.config.deployment.SETTINGS,
# parathink.form_policy's PARATHINK_FORM_ALLOW and PARATHINK_DATA_ROOTS): the worker's values go into the pod, so the
# plan there sees what it would see here. Worker-only settings (PARATHINK_BIN, PARATHINK_WORKDIR,
# PARATHINK_CONFIG_DIR: paths on the worker) do not.
# The deployment's variables are form.DEPLOYMENT_KEYS and those deployment_overrides reads beside them.
PLAN_ENV = ("PARATHINK_CLUSTER", "PARATHINK_RUNS_ROOT", *DEPLOYMENT_KEYS, "PARATHINK_HF_TOKEN_SECRET",
            "PARATHINK_DATA_ROOTS", "PARATHINK_FORM_ALLOW")
PLAN_CONTAINER = "main"


def plan_pod_template(env: Mapping[str, str]) -> dict[str, Any]:
    """The Pod that runs ``parathink plan`` where the worker has no ``parathink``: the trainer image
    (``PARATHINK_PLAN_IMAGE``, else ``PARATHINK_IMAGE``) in ``PARATHINK_NAMESPACE`` as
    ``PARATHINK_SERVICE_ACCOUNT``, with no API token (the plan calls no API), non-root (uid 1000), small requests,
    a deadline, and the plan's own environment (``PLAN_ENV``). No command: :func:`plan_pod` adds it."""
    image = next((env[k].strip() for k in PLAN_IMAGE_ENVS if env.get(k, "").strip()), None)
    if not image:
        raise SettingError("plan: it runs in a pod here (this worker has no parathink, or PARATHINK_PLAN_IN=pod) and "
                           "no image is set for it; set PARATHINK_IMAGE (the trainer image) or PARATHINK_PLAN_IMAGE")
    container: dict[str, Any] = {
        "name": PLAN_CONTAINER, "image": image,
        "imagePullPolicy": env.get("PARATHINK_IMAGE_PULL_POLICY", "").strip() or "IfNotPresent",
        "env": [{"name": k, "value": env[k]} for k in PLAN_ENV if env.get(k, "").strip()],
        "resources": {k: dict(v) for k, v in PLAN_RESOURCES.items()},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "parathink-plan",
                     "namespace": env.get("PARATHINK_NAMESPACE", "").strip() or DEFAULT_NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "parathink", "app.kubernetes.io/component": "plan"}},
        "spec": {
            "serviceAccountName": env.get("PARATHINK_SERVICE_ACCOUNT", "").strip() or DEFAULT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False, "restartPolicy": "Never",
            "activeDeadlineSeconds": PLAN_DEADLINE_S,
            "securityContext": {"runAsNonRoot": True, "runAsUser": PLAN_UID, "runAsGroup": PLAN_UID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }


def plan_pod(args: Sequence[str], env: Mapping[str, str], *, got_log: Callable[[str], None] | None = None,
             kubeconfig: str | None = None, context: str | None = None,
             conn_id: str | None = "kubernetes_default"):
    """The ``KubernetesPodOperator`` that runs ``parathink plan ARGS`` (the worker's call, argument for argument) in
    :func:`plan_pod_template`'s pod. ``got_log`` gets the container's whole log once it has finished, before the
    pod is deleted (succeeded or failed: a refused form is the user's, the task log has its line)."""
    from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback

    class ReadLog(KubernetesPodOperatorCallback):
        @staticmethod
        def on_pod_completion(*, pod, client, mode, **kwargs) -> None:
            if got_log is None:
                return
            # The raw response: preloaded, the client json.loads a log that is one JSON document (the plan's,
            # without a line on stderr) and returns that dict's Python repr as the "str" (seen on the API server).
            response = client.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace,
                                                      container=PLAN_CONTAINER, _preload_content=False)
            got_log(response.data.decode("utf-8", "replace"))

    return _operator(plan_pod_template(env), ["plan", *args], task_id="plan-pod",
                     startup_timeout_s=PLAN_STARTUP_TIMEOUT_S, on_finish_action="delete_pod", get_logs=False,
                     callbacks=[ReadLog], kubeconfig=kubeconfig, context=context, conn_id=conn_id)


def plan_document(code: int, log: str) -> dict:
    """What a plan pod's exit code and log mean: the plan document (exit 0), or PlanRefused with the same one line
    the worker's ``parathink plan`` gives (its last ``parathink:`` line: exit 2 is a refused form).

    The log holds stdout and stderr together; the document is the JSON object ``parathink plan`` prints (indented,
    its first line a lone ``{``), whatever lines stderr adds around it."""
    if code != 0:
        raise refused(code, log)
    decoder = json.JSONDecoder()
    lines = log.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "{":
            try:
                doc, _ = decoder.raw_decode("".join(lines[i:]))
            except ValueError:
                continue
            if isinstance(doc, dict) and "placement" in doc:
                return doc
    tail = [line for line in log.splitlines() if line.strip()][-3:]
    raise PlanRefused(1, f"plan: the plan pod exited 0 but its log holds no plan document (last lines: "
                         f"{' | '.join(tail) or '(no output)'})")


def plan_in_pod(args: Sequence[str], task_context: Mapping[str, Any], env: Mapping[str, str],
                say: Callable[[str], None], started: Callable[[Any], None] | None = None, **cluster) -> dict:
    """``parathink plan ARGS`` in a pod of the trainer image, as :func:`local.plan` runs it on the worker: the plan
    document, or PlanRefused with parathink's one line. ``started`` gets the operator before its pod is created
    (the task's on_kill deletes it); ``say`` gets the plan's log when it fails (the task log); ``task_context`` is
    the Airflow task's; ``cluster`` (kubeconfig, context, conn_id) as :func:`plan_pod` takes them."""
    logs: list[str] = []
    operator = plan_pod(args, env, got_log=logs.append, **cluster)
    pod = operator.pod_template_dict
    say(f"plan: in a pod of {pod['spec']['containers'][0]['image']} in namespace {pod['metadata']['namespace']}")
    if started:
        started(operator)
    code = run(operator, task_context)
    text = logs[-1] if logs else ""
    if code == 0 and not logs:
        raise PlanRefused(1, "plan: the plan pod succeeded but its log could not be read")
    try:
        return plan_document(code, text)
    except PlanRefused:
        for line in [line for line in text.splitlines() if line.strip()][-30:]:
            say(line)
        raise


# ---------------------------------------------------------------- the stages' pods


def stage_pod(pod: Mapping[str, Any], placement: Mapping[str, Any], argv: Sequence[str], *,
              task_id: str | None = None, get_logs: bool = True, kubeconfig: str | None = None,
              context: str | None = None, conn_id: str | None = "kubernetes_default"):
    """The ``KubernetesPodOperator`` that runs ``parathink ARGV...`` in ``pod``, the stage's Pod as ``parathink plan``
    rendered it (``pods``: placement.podspec); the operator only adds the command, its labels and a name suffix.

    ``placement`` gives what is the operator's own (the start-up timeout). ``argv`` starts with ``stage NAME``.
    ``kubeconfig``/``context`` (and ``conn_id=None``) point it at a cluster outside Airflow's connections, as the
    command line does.
    """
    # `parathink stage NAME`, not torchrun: that process starts its placement's launch (one rank per GPU of this pod,
    # parathink.launch) and exits with the ranks' own code, which run() reads (torchrun's is always 1).
    return _operator(pod, argv, task_id=task_id or f"parathink-{placement['stage']}",
                     startup_timeout_s=placement["startup_timeout_s"], on_finish_action="delete_succeeded_pod",
                     get_logs=get_logs, kubeconfig=kubeconfig, context=context, conn_id=conn_id)


def _operator(pod: Mapping[str, Any], argv: Sequence[str], *, task_id: str, startup_timeout_s: int,
              on_finish_action: str, get_logs: bool, callbacks=None, kubeconfig: str | None,
              context: str | None, conn_id: str | None):
    """``parathink ARGV...`` in ``pod``: the one command every parathink pod of the DAGs runs."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    (container,) = pod["spec"]["containers"]
    return KubernetesPodOperator(
        task_id=task_id,
        pod_template_dict=dict(pod),
        base_container_name=container["name"],  # the container whose log is followed and exit code read
        cmds=["parathink"],
        arguments=list(argv),
        startup_timeout_seconds=startup_timeout_s,
        on_finish_action=on_finish_action,
        get_logs=get_logs,
        log_pod_spec_on_failure=False,  # the spec is in the plan; the failure message stays one screen
        callbacks=callbacks,
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

"""A kubelet without containers, for the test control plane: it registers a node, runs what is bound to it, and
reports back through the real API as a kubelet would.

A pod bound to the node (by the real scheduler) goes Running, then Succeeded or Failed. On a node that runs
commands (the CPU node: this machine is one), a container whose command is ``parathink ...`` really runs, as a
process of this machine with the project's own ``parathink`` and the pod's
environment (Secrets read through the API, as the kubelet does): its exit code becomes the pod's, its output the
pod's log, which the API server fetches from this kubelet's HTTPS endpoint on 127.0.0.1 (``kubectl logs``, the
KubernetesPodOperator). A GPU node that runs commands (kube_cluster.TWO_GPU_NODE) advertises fake GPUs: its
stage's ranks (parathink.launch) run on this machine's CPU. Any other container, and every container on a GPU node
that does not run commands, succeeds at once. A deleted pod is removed at once, as a kubelet does after its
containers stop.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

PARATHINK = Path(sys.executable).with_name("parathink")  # the venv running the tests has the project installed
STAGE_TIMEOUT_S = 600


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(name: str, labels: dict, taints: list[dict], capacity: dict, port: int) -> dict:
    """A Ready node whose kubelet (this object) answers on 127.0.0.1:port."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": "amd64", **labels}},
            "spec": {"taints": taints},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "fake kubelet", "lastHeartbeatTime": _now(),
                                       "lastTransitionTime": _now()}],
                       "nodeInfo": {"kubeletVersion": "v1.20.2-fake", "operatingSystem": "linux",
                                    "architecture": "amd64", "containerRuntimeVersion": "fake://0",
                                    "kernelVersion": "", "osImage": "", "kubeProxyVersion": "", "machineID": "",
                                    "systemUUID": "", "bootID": ""}}}


class _LogHandler(http.server.BaseHTTPRequestHandler):
    """GET /containerLogs/NAMESPACE/POD/CONTAINER: what the API server asks a kubelet for a pod's log."""

    def do_GET(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        text = self.server.logs.get(tuple(parts[1:3])) if len(parts) == 4 and parts[0] == "containerLogs" else None
        body = (text or "").encode()
        self.send_response(200 if text is not None else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class FakeKubelet:
    def __init__(self, api: client.ApiClient, name: str, labels: dict, taints: list[dict], capacity: dict,
                 serving_cert: tuple[Path, Path], runs_commands: bool = False):
        self.core = client.CoreV1Api(api)
        self.name = name
        self.runs_commands = runs_commands
        self.logs: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._started: set[str] = set()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LogHandler)
        self._server.logs = self.logs
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*map(str, serving_cert))
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.node = node_object(name, labels, taints, capacity, self._server.server_address[1])
        self._threads: list[threading.Thread] = []

    def start(self) -> FakeKubelet:
        node = self.core.create_node({k: v for k, v in self.node.items() if k != "status"})
        self.core.patch_node_status(self.name, {"status": self.node["status"]})
        # The API server taints a new node not-ready (TaintNodesByCondition); kube-controller-manager's node
        # lifecycle controller lifts it once the kubelet reports Ready. There is none here: do what it does.
        self.core.patch_node(self.name, {"spec": {"taints": self.node["spec"]["taints"] or None}})
        self.uid = node.metadata.uid
        for target in (self._server.serve_forever, self._watch):
            t = threading.Thread(target=target, daemon=True, name=f"kubelet-{self.name}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=10)

    # -- pods -------------------------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self.core.list_pod_for_all_namespaces, timeout_seconds=2,
                                      field_selector=f"spec.nodeName={self.name}"):
                    self._on_pod(event["object"])
                    if self._stop.is_set():
                        break
            except ApiException as e:
                if e.status != 410:  # a watch that outlived etcd's history restarts; anything else is a bug
                    raise
            finally:
                w.stop()

    def _on_pod(self, pod: client.V1Pod) -> None:
        ns, name = pod.metadata.namespace, pod.metadata.name
        if pod.metadata.deletion_timestamp:
            try:
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
            return
        if pod.metadata.uid in self._started or pod.status.phase != "Pending":
            return
        self._started.add(pod.metadata.uid)
        threading.Thread(target=self._run, args=(pod,), daemon=True).start()

    def _run(self, pod: client.V1Pod) -> None:
        container = pod.spec.containers[0]
        started = _now()
        try:
            env = self._env(pod.metadata.namespace, container)
        except ApiException as e:  # a missing Secret: the kubelet's CreateContainerConfigError, the pod stays Pending
            self._status(pod, "Pending", {"waiting": {"reason": "CreateContainerConfigError", "message": e.reason}})
            return
        self.logs[(pod.metadata.namespace, pod.metadata.name)] = ""
        self._status(pod, "Running", {"running": {"startedAt": started}})
        code, output = self._execute(container, env)
        self.logs[(pod.metadata.namespace, pod.metadata.name)] = output
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": started, "finishedAt": _now()}
        self._status(pod, "Succeeded" if code == 0 else "Failed", {"terminated": terminated})

    def _env(self, namespace: str, container: client.V1Container) -> dict[str, str]:
        env = {}
        for var in container.env or []:
            if var.value_from and var.value_from.secret_key_ref:
                ref = var.value_from.secret_key_ref
                secret = self.core.read_namespaced_secret(ref.name, namespace)
                env[var.name] = base64.b64decode((secret.data or {})[ref.key]).decode()
            elif var.value is not None:
                env[var.name] = var.value
        return env

    def _execute(self, container: client.V1Container, env: dict[str, str]) -> tuple[int, str]:
        argv = list(container.command or []) + list(container.args or [])
        if not self.runs_commands or not argv or Path(argv[0]).name != "parathink":
            return 0, f"fake kubelet: {argv[:3]} not run on this machine\n"
        workdir = tempfile.mkdtemp(prefix="fake-kubelet-")
        try:
            proc = subprocess.run([str(PARATHINK), *argv[1:]], cwd=workdir, capture_output=True, text=True,
                                  timeout=STAGE_TIMEOUT_S, env={**os.environ, "CI": "true", **env})
            return proc.returncode, proc.stdout + proc.stderr
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _status(self, pod: client.V1Pod, phase: str, state: dict) -> None:
        running = phase == "Running"
        statuses = [{"name": c.name, "image": c.image, "imageID": f"fake://{c.image}", "ready": running,
                     "started": running, "restartCount": 0, "state": state,
                     "containerID": f"fake://{pod.metadata.uid}/{c.name}"} for c in pod.spec.containers]
        kinds = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        conditions = [{"type": t, "status": "True" if (t in kinds[:2] or running) else "False",
                       "lastTransitionTime": _now()} for t in kinds]
        status = {"phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": _now(),
                  "conditions": conditions, "containerStatuses": statuses}
        if pod.spec.init_containers:
            done = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": _now()}}
            status["initContainerStatuses"] = [{"name": c.name, "image": c.image, "imageID": "", "ready": True,
                                                "restartCount": 0, "state": done} for c in pod.spec.init_containers]
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})
        except ApiException as e:
            if e.status != 404:  # deleted while it ran (a cancelled task)
                raise

"""``parathink kfp trainjob NAME [overrides]``: run one stage on several nodes as a Kubeflow Trainer v2 TrainJob.

The KFP task of a multi-node stage runs this in a small CPU pod: it validates the config, creates the TrainJob
(:func:`parathink.kfp.manifests.trainjob_manifest`), waits for its ``Complete`` or ``Failed`` condition, and
deletes it when the task itself is stopped. The TrainJob's pods run ``torchrun -m parathink.cli stage NAME``;
the runner joins the processes.

Exit codes follow ``parathink stage``: 0 complete, 2 bad config or a Kubeflow Trainer older than v2.2 (nothing
created; :func:`check_trainer`), 1 the TrainJob failed or did not
start within ``startup_timeout_s`` (its status carries no exit code, so a failure is retried as exit 1 by the
component; the stages that run on several nodes have no data-quality gate).

The TrainJob goes to the namespace the launcher's own pod runs in (its service account's ``namespace`` file): KFP
chose it (``kubeflow``, or a multi-user profile's), not the cluster profile, and the ownerReference to the
launcher's Pod must stay within one namespace.

The API server is reached with the pod's service account (in-cluster: ``KUBERNETES_SERVICE_HOST``, the mounted
token and CA) through httpx, which parathink already depends on, so the trainer image needs no Kubernetes client.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import sys
import time
from pathlib import Path

from parathink.errors import ConfigError
from parathink.logs import log

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
POLL_S = 30  # a TrainJob runs for hours: a status read every 30 s costs the API server nothing worth counting
TRAINER_MIN_VERSION = "v2.2.0"  # the first Kubeflow Trainer whose TrainJob has spec.runtimePatches
GET_FAILURES = 5  # consecutive failed status reads (an API server restart) before the launcher gives up


class KubeError(RuntimeError):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class KubeAPI:
    """The few calls the launcher makes: create, read and delete one namespaced object (a TrainJob)."""

    def __init__(self, base_url: str, token: str | None = None, verify: ssl.SSLContext | bool = True, client=None):
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = client or httpx.Client(base_url=base_url, headers=headers, verify=verify, timeout=30.0)

    @classmethod
    def in_cluster(cls) -> KubeAPI:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token = SERVICE_ACCOUNT_DIR / "token"
        if not host or not token.is_file():
            raise ConfigError("parathink kfp trainjob: no in-cluster service account (KUBERNETES_SERVICE_HOST and "
                              f"{token}); it runs inside the KFP task of a multi-node stage")
        tls = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
        return cls(f"https://{host}:{port}", token.read_text().strip(), tls)

    @staticmethod
    def own_namespace() -> str | None:
        """The namespace of the pod this runs in (None outside a pod with a mounted service account)."""
        try:
            return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
        except OSError:
            return None

    @staticmethod
    def path(manifest: dict, name: str | None = None) -> str:
        group_version, kind = manifest["apiVersion"], manifest["kind"]
        plural = kind.lower() + "s"  # TrainJob -> trainjobs, Pod -> pods
        root = "/apis" if "/" in group_version else "/api"  # the core group (v1) has its own root
        ns = manifest["metadata"]["namespace"]
        return f"{root}/{group_version}/namespaces/{ns}/{plural}" + (f"/{name}" if name else "")

    def _call(self, method: str, path: str, **kw) -> dict:
        import httpx

        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as err:  # unreachable, TLS, timeout: the same exit 1 as a refused call
            raise KubeError(f"{method} {path}: {err}", 0) from err
        if r.status_code >= 400:
            raise KubeError(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}", r.status_code)
        return r.json() if r.content else {}

    def pod_reference(self, namespace: str, name: str) -> dict:
        """An ownerReference to the Pod ``namespace/name`` (the launcher's own, found by its hostname)."""
        pod = self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"]}

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        """Create ``manifest``; ``dry_run``: validated, defaulted and pruned by the API server, stored nowhere."""
        return self._call("POST", self.path(manifest) + ("?dryRun=All" if dry_run else ""), json=manifest)

    def get(self, manifest: dict) -> dict:
        return self._call("GET", self.path(manifest, manifest["metadata"]["name"]))

    def delete(self, manifest: dict, missing_ok: bool = False) -> None:
        # Background: the object goes now and the garbage collector removes its JobSet and pods after it.
        try:
            self._call("DELETE", self.path(manifest, manifest["metadata"]["name"]),
                       json={"propagationPolicy": "Background"})
        except KubeError as err:
            if not (missing_ok and err.status == 404):
                raise


def _condition(obj: dict) -> tuple[str, str] | None:
    """("Complete" | "Failed", message) once the TrainJob has finished, else None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"], c.get("message") or c.get("reason") or ""
    return None


def _started(obj: dict) -> bool:
    """Some node job has ready (or finished) pods: the nodes were scaled up and the image pulled."""
    jobs = (obj.get("status") or {}).get("jobsStatus") or []
    return any((j.get("ready") or 0) + (j.get("succeeded") or 0) + (j.get("failed") or 0) > 0 for j in jobs)


def wait(api: KubeAPI, manifest: dict, startup_timeout_s: float, poll_s: float = POLL_S) -> int:
    """Wait for the TrainJob to finish; 0 when Complete, 1 when Failed or not started within the timeout."""
    name = manifest["metadata"]["name"]
    created = time.monotonic()
    started, failures = False, 0
    while True:
        try:
            obj, failures = api.get(manifest), 0
        except KubeError:
            failures += 1
            if failures >= GET_FAILURES:
                raise
            time.sleep(poll_s)
            continue
        done = _condition(obj)
        if done:
            kind, message = done
            log(f"TrainJob {name}: {kind}{': ' + message if message else ''}")
            return 0 if kind == "Complete" else 1
        if not started and _started(obj):
            started = True
            print(f"[parathink] TrainJob {name}: running", file=sys.stderr, flush=True)
        if not started and time.monotonic() - created > startup_timeout_s:
            print(f"[parathink] TrainJob {name}: no node ready after {startup_timeout_s:.0f} s "
                  "(cluster.startup_timeout_s); deleting it", file=sys.stderr, flush=True)
            api.delete(manifest)
            return 1
        time.sleep(poll_s)


def check_trainer(api: KubeAPI, manifest: dict) -> None:
    """Refuse (ConfigError) a Kubeflow Trainer whose TrainJob CRD would drop ``spec.runtimePatches``.

    ``runtimePatches`` came with Trainer v2.2; an older CRD's structural schema prunes the field silently, and the
    TrainJob's pods would start without the GPU pool's tolerations, /dev/shm and the service account. A dry-run
    create asks the API server what it would store (the CRD's schema applied, nothing created; the runner's
    ``create`` on trainjobs is all it needs).
    """
    stored = api.create(manifest, dry_run=True).get("spec") or {}
    if stored.get("runtimePatches") != manifest["spec"]["runtimePatches"]:
        raise ConfigError(f"Kubeflow Trainer on this cluster drops spec.runtimePatches from TrainJobs (a CRD older "
                          f"than {TRAINER_MIN_VERSION}); parathink's multi-node stages need Kubeflow Trainer "
                          f">= {TRAINER_MIN_VERSION}")


def launch(api: KubeAPI, manifest: dict, startup_timeout_s: float, poll_s: float = POLL_S) -> int:
    """Create the TrainJob and wait for it; a stopped task (SIGTERM, Ctrl-C) deletes it instead of leaking GPUs."""
    name = manifest["metadata"]["name"]

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)  # before the create: no moment where a stop would leak it
    try:
        api.create(manifest)
        print(f"[parathink] TrainJob {name} created in {manifest['metadata']['namespace']}", file=sys.stderr,
              flush=True)
        return wait(api, manifest, startup_timeout_s, poll_s)
    except KeyboardInterrupt:
        api.delete(manifest, missing_ok=True)
        print(f"[parathink] TrainJob {name}: stopped, deleted", file=sys.stderr, flush=True)
        return 130
    except KubeError:
        # The component retries exit 1 with a new TrainJob: this one must not go on training beside it.
        with contextlib.suppress(KubeError):
            api.delete(manifest, missing_ok=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def main_trainjob(stage: str, overrides: list[str], api: KubeAPI | None = None, poll_s: float = POLL_S,
                  namespace: str | None = None) -> int:
    """``parathink kfp trainjob NAME [overrides]`` (``api``: given by tests; in a pod, the in-cluster one).
    ``namespace``: where the TrainJob goes; in a pod, the pod's own; else (tests) the profile's."""
    from parathink.kfp.plan import make_plan, objects

    try:
        plan = make_plan([*overrides, f"stages=[{stage}]"])
        p = plan.placements[stage]
        if p.nodes < 2:
            raise ConfigError(f"{stage}: the cluster profile puts it on one node; run `parathink stage {stage}`")
        in_pod = api is None
        api = api or KubeAPI.in_cluster()
        namespace = namespace or (KubeAPI.own_namespace() if in_pod else None)
        if namespace:
            plan = plan.in_namespace(namespace)
            p = plan.placements[stage]
    except ConfigError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 2
    try:
        # Owned by the launcher's Pod, so that deleting KFP's pods (a run stopped or cleaned up) deletes the TrainJob
        # too, even where the launcher is killed before its SIGTERM handler can run.
        owner = api.pod_reference(p.namespace, os.environ["HOSTNAME"]) if in_pod and "HOSTNAME" in os.environ else None
        _, manifest = objects(plan, stage, owner)
        check_trainer(api, manifest)
        return launch(api, manifest, p.startup_timeout_s, poll_s)
    except ConfigError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 2
    except KubeError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 1

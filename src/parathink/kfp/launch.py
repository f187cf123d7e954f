"""``parathink kfp trainjob NAME [overrides]``: run one stage on several nodes as a Kubeflow Trainer v2 TrainJob.

The KFP task of a multi-node stage runs this in a small CPU pod: it validates the config, creates the TrainJob
(:func:`parathink.kfp.manifests.trainjob_manifest`), waits for its ``Complete`` or ``Failed`` condition, and
deletes it when the task itself is stopped. The TrainJob's pods run ``torchrun -m parathink.cli stage NAME``;
the runner joins the processes.

Exit codes follow ``parathink stage``: 0 complete, 2 bad config (nothing created), 1 the TrainJob failed or did not
start within ``startup_timeout_s`` (its status carries no exit code, so a failure is retried as exit 1 by the
component; the stages that run on several nodes have no data-quality gate).

The API server is reached with the pod's service account (in-cluster: ``KUBERNETES_SERVICE_HOST``, the mounted
token and CA) through httpx, which parathink already depends on, so the trainer image needs no Kubernetes client.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from parathink.kfp import manifests
from parathink.stages.context import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
POLL_S = 30  # a TrainJob runs for hours: a status read every 30 s costs the API server nothing worth counting


class KubeError(RuntimeError):
    pass


class KubeAPI:
    """The few calls the launcher makes: create, read and delete one namespaced custom object."""

    def __init__(self, base_url: str, token: str | None = None, verify: str | bool = True, client=None):
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = client or httpx.Client(base_url=base_url, headers=headers, verify=verify, timeout=30.0)

    @classmethod
    def in_cluster(cls) -> "KubeAPI":
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token = SERVICE_ACCOUNT_DIR / "token"
        if not host or not token.is_file():
            raise ConfigError("parathink kfp trainjob: no in-cluster service account (KUBERNETES_SERVICE_HOST and "
                              f"{token}); it runs inside the KFP task of a multi-node stage")
        return cls(f"https://{host}:{port}", token.read_text().strip(), str(SERVICE_ACCOUNT_DIR / "ca.crt"))

    @staticmethod
    def path(manifest: dict, name: str | None = None) -> str:
        group_version, kind = manifest["apiVersion"], manifest["kind"]
        plural = kind.lower() + "s"  # TrainJob -> trainjobs
        ns = manifest["metadata"]["namespace"]
        return f"/apis/{group_version}/namespaces/{ns}/{plural}" + (f"/{name}" if name else "")

    def _call(self, method: str, path: str, **kw) -> dict:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise KubeError(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json() if r.content else {}

    def create(self, manifest: dict) -> dict:
        return self._call("POST", self.path(manifest), json=manifest)

    def get(self, manifest: dict) -> dict:
        return self._call("GET", self.path(manifest, manifest["metadata"]["name"]))

    def delete(self, manifest: dict) -> None:
        self._call("DELETE", self.path(manifest, manifest["metadata"]["name"]),
                   json={"propagationPolicy": "Foreground"})


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
    started = False
    while True:
        obj = api.get(manifest)
        done = _condition(obj)
        if done:
            kind, message = done
            print(f"[parathink] TrainJob {name}: {kind}{': ' + message if message else ''}", file=sys.stderr,
                  flush=True)
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


def launch(api: KubeAPI, manifest: dict, startup_timeout_s: float, poll_s: float = POLL_S) -> int:
    """Create the TrainJob and wait for it; a stopped task (SIGTERM, Ctrl-C) deletes it instead of leaking GPUs."""
    api.create(manifest)
    print(f"[parathink] TrainJob {manifest['metadata']['name']} created in {manifest['metadata']['namespace']}",
          file=sys.stderr, flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return wait(api, manifest, startup_timeout_s, poll_s)
    except KeyboardInterrupt:
        api.delete(manifest)
        print(f"[parathink] TrainJob {manifest['metadata']['name']}: stopped, deleted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def main_trainjob(stage: str, overrides: list[str], api: KubeAPI | None = None) -> int:
    """``parathink kfp trainjob NAME [overrides]``."""
    from parathink.kfp.plan import make_plan

    try:
        plan = make_plan([*overrides, f"stages=[{stage}]"])
        p = plan.placements[stage]
        if p.nodes < 2:
            raise ConfigError(f"{stage}: the cluster profile puts it on one node; run `parathink stage {stage}`")
        command = manifests.stage_command(stage, plan.run_dir, plan.overrides)
        manifest = manifests.trainjob_manifest(p, command, manifests.trainjob_name(stage))
        api = api or KubeAPI.in_cluster()
    except ConfigError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 2
    try:
        return launch(api, manifest, p.startup_timeout_s)
    except KubeError as err:
        print(f"parathink: error: {err}", file=sys.stderr)
        return 1

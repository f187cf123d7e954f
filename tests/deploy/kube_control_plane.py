"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and kube-scheduler as processes.

The binaries come from ``make kube-control-plane`` (1.20, built from Debian's source; mk/kube.mk) and etcd from
Debian's etcd-server. Everything binds to 127.0.0.1 on free ports: the API server with its insecure port off,
the scheduler with its insecure port off and its secure port on loopback (both open ports on every interface by
default). Certificates are made in the session's temporary folder. There is no kube-controller-manager: the
tests do what its token controller would (``ensure_token_secret``) and a fake kubelet plays the nodes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from kube_pki import Pki

KUBE_BIN = Path(os.environ.get("PARATHINK_KUBE_BIN", Path.home() / ".cache/parathink/kube-1.20/bin"))
START_TIMEOUT_S = 120
ADMIN = ("admin", "kubernetes-admin", ("system:masters",))


class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binaries() -> dict[str, Path]:
    """The three programs, or a ControlPlaneError that says how to get them."""
    found = {"kube-apiserver": KUBE_BIN / "kube-apiserver", "kube-scheduler": KUBE_BIN / "kube-scheduler",
             "etcd": Path(shutil.which("etcd") or "/usr/bin/etcd")}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{', '.join(missing)} not found (looked in {KUBE_BIN} and PATH): "
                                f"run `make kube-control-plane` (builds them once, about 5 minutes)")
    return found


class ControlPlane:
    def __init__(self, folder: Path):
        self.folder = folder
        self.bins = binaries()
        self.pki = Pki(folder / "pki")
        self.procs: dict[str, subprocess.Popen] = {}
        self.api_port = free_port()
        self.url = f"https://127.0.0.1:{self.api_port}"

    # -- identities -------------------------------------------------------------------------------------------
    def kubeconfig(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig that authenticates as ``user`` in ``groups`` (a client certificate)."""
        crt, key = self.pki.issue(name, user, groups)
        path = self.folder / f"{name}.kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
            f"clusters: [{{name: test, cluster: {{server: '{self.url}', "
            f"certificate-authority: '{self.pki.ca_path}'}}}}]\n"
            f"users: [{{name: {name}, user: {{client-certificate: '{crt}', client-key: '{key}'}}}}]\n"
            f"contexts: [{{name: test, context: {{cluster: test, user: {name}}}}}]\n")
        return path

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """Authenticates as the service account NAMESPACE/NAME: RBAC sees what it would see for the pod's token."""
        return self.kubeconfig(f"sa-{namespace}-{name}", f"system:serviceaccount:{namespace}:{name}",
                               ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"))

    # -- processes --------------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        log.close()

    def _wait(self, name: str, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                tail = (self.folder / f"{name}.log").read_text(errors="replace")[-2000:]
                raise ControlPlaneError(f"{name} exited with {self.procs[name].returncode}:\n{tail}")
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} not ready after {START_TIMEOUT_S} s (log: {self.folder / name}.log)")

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", [str(self.bins["etcd"]), "--name=test", f"--data-dir={self.folder / 'etcd'}",
                             f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
                             f"--listen-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-cluster=test=http://127.0.0.1:{peer}", "--log-level=warn"])
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"))

    def _start_apiserver(self) -> None:
        crt, key = self.pki.issue("apiserver", "kube-apiserver", server=True)
        sa_key, sa_pub = self.pki.signing_key("service-account")
        admin = self.pki.issue(*ADMIN)
        self.admin_kubeconfig = self.kubeconfig(*ADMIN)
        self._spawn("kube-apiserver", [
            str(self.bins["kube-apiserver"]), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            "--insecure-port=0", f"--cert-dir={self.folder / 'apiserver'}",
            f"--tls-cert-file={crt}", f"--tls-private-key-file={key}", f"--client-ca-file={self.pki.ca_path}",
            f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc", "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
            # The fake kubelet serves logs on 127.0.0.1 with a certificate of the test CA.
            "--kubelet-preferred-address-types=InternalIP", f"--kubelet-certificate-authority={self.pki.ca_path}",
            # Generic ephemeral volumes (the profile's scratch volume) are alpha in 1.20, on by default from 1.21.
            "--feature-gates=GenericEphemeralVolume=true",
            "--profiling=false", "--v=1"])
        self._wait("kube-apiserver", lambda: _http_ok(f"{self.url}/readyz", cert=admin, verify=self.pki.ca_path))

    def _start_scheduler(self) -> None:
        kubeconfig = self.kubeconfig("scheduler", "system:kube-scheduler")
        port = free_port()
        self._spawn("kube-scheduler", [
            str(self.bins["kube-scheduler"]), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--port=0", "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.folder / 'scheduler'}", "--profiling=false", "--v=1"])
        self._wait("kube-scheduler", lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", verify=False))

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}


@contextlib.contextmanager
def running(folder: Path):
    """A started control plane for the block (a test fixture's body), stopped after it; a missing binary or a
    failed start fails the test with the reason, not an error trace."""
    import pytest

    try:
        plane = ControlPlane(folder).start()
    except ControlPlaneError as e:
        pytest.fail(str(e))
    try:
        yield plane
    finally:
        plane.stop()


def _http_ok(url: str, cert: tuple[Path, Path] | None = None, verify: Path | bool = True) -> bool:
    ctx = ssl.create_default_context(cafile=str(verify)) if isinstance(verify, Path) else ssl.create_default_context()
    if verify is False:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*map(str, cert))
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx if url.startswith("https") else None) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def ensure_token_secret(core, namespace: str, account: str) -> None:
    """What kube-controller-manager's token controller does (there is none here): give the service account a
    token Secret, without which the ServiceAccount admission plugin rejects every pod that runs as it."""
    sa = core.read_namespaced_service_account(account, namespace)
    if sa.secrets:
        return
    name = f"{account}-token"
    core.create_namespaced_secret(namespace, {
        "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": account,
                                                   "kubernetes.io/service-account.uid": sa.metadata.uid}},
        "type": "kubernetes.io/service-account-token", "data": {"token": "", "ca.crt": "", "namespace": ""}})
    core.patch_namespaced_service_account(account, namespace, {"secrets": [{"name": name}]})

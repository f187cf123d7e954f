"""A real single-node Kubernetes cluster on this machine, for `make kube-up` / `make kube-down` and tests/e2e.

    python tests/e2e/local_cluster.py up      # idempotent; prints the kubeconfig's path on its last line
    python tests/e2e/local_cluster.py down    # stops what `up` started, by PID; removes mounts, bridge, chains

Every component is the real program: etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet and kube-proxy 1.20 (built from Debian's source, mk/kube.mk), containerd 1.6 with runc and
Debian's CNI plugins (a bridge of its own, BRIDGE, with host-local addresses). The node advertises the GPU pool
of hydra_conf/cluster/gpu.yaml: its labels and a *fake* ``nvidia.com/gpu`` capacity, so the scheduler places GPU
pods for real (node selector, GPU count), and the containers that run there are CPU containers. The pool's taint
is not set: the one node also runs the CPU stages and the services, which tolerate nothing. Stand-ins, where
nothing real can run here: cluster_dns.py answers the cluster's DNS names (CoreDNS has no source in Debian's
kubernetes package), and the pause image is compiled from the kubernetes source (no registry to pull
k8s.gcr.io/pause from). NetworkPolicies are stored, not enforced (the bridge plugin enforces none).

State lives in CLUSTER_DIR (~/.cache/parathink/cluster): certificates, etcd, logs, PIDs. containerd's image store
stays there across `down` (the imported images are the slow part of `up`); everything else is made again.
Quirks of this sandbox, each a setting below: containerd's CRI may not lower oom_score_adj
(``restrict_oom_score_adj``), and the cgroups are v1 (kubelet's cgroupfs driver).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "deploy"))

from kube_pki import Pki  # noqa: E402

CLUSTER_DIR = Path(os.environ.get("PARATHINK_CLUSTER_DIR", Path.home() / ".cache/parathink/cluster"))
KUBE_BIN = Path(os.environ.get("PARATHINK_KUBE_BIN", Path.home() / ".cache/parathink/kube-1.20/bin"))
NODE = "parathink-node"
BRIDGE = "ptk0"
NODE_IP = "10.244.0.1"          # the bridge's address: every component listens here or on 127.0.0.1
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
API_SERVICE_IP = "10.96.0.1"
API_PORT, KUBELET_PORT, ETCD_PORT, ETCD_PEER_PORT = 6443, 10250, 23790, 23800
PAUSE_IMAGE = "k8s.gcr.io/pause:3.2"
NAMESPACE = "k8s.io"            # containerd's namespace of the CRI
# Started in this order, stopped in the reverse one.
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet",
              "kube-proxy", "dns"]
# Kernel settings that `up` (or the kubelet it starts) changes; `down` puts the values it found back.
SYSCTLS = {"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1", "vm/overcommit_memory": None,
           "kernel/panic": None, "kernel/panic_on_oops": None, "net/ipv4/conf/all/route_localnet": None}
START_TIMEOUT_S = 180


class ClusterError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"kube: {msg}", file=sys.stderr, flush=True)


def sh(*argv, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        out = (proc.stderr or proc.stdout)[-800:]
        raise ClusterError(f"{' '.join(map(str, argv))} exited {proc.returncode}: {out}")
    return proc


class Paths:
    def __init__(self, root: Path):
        self.root = root
        self.run, self.logs, self.pki = root / "run", root / "logs", root / "pki"
        self.etcd, self.kubelet, self.cni = root / "etcd", root / "kubelet", root / "cni"
        self.containerd = root / "containerd"
        self.sock = self.containerd / "containerd.sock"
        self.admin_kubeconfig = root / "admin.kubeconfig"
        self.sysctl_saved = root / "sysctl.json"

    def pidfile(self, name: str) -> Path:
        return self.run / f"{name}.pid"


# -- processes ------------------------------------------------------------------------------------------------

def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie or a reused PID of another program does not count.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def read_pid(paths: Paths, name: str) -> int | None:
    try:
        pid = int(paths.pidfile(name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def spawn(paths: Paths, name: str, argv: list) -> int:
    with open(paths.logs / f"{name}.log", "ab") as out:
        proc = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    paths.pidfile(name).write_text(str(proc.pid))
    return proc.pid


def wait(paths: Paths, name: str, ready, what: str = "ready") -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if read_pid(paths, name) is None:
            tail = (paths.logs / f"{name}.log").read_text(errors="replace")[-2500:]
            raise ClusterError(f"{name} exited:\n{tail}")
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise ClusterError(f"{name} not {what} after {START_TIMEOUT_S} s (log: {paths.logs / name}.log)")


def stop_pid(pid: int, timeout: float = 20) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)  # each component leads a session of its own (start_new_session)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- host settings: sysctls, bridge, iptables -----------------------------------------------------------------

def set_sysctls(paths: Paths) -> None:
    saved = json.loads(paths.sysctl_saved.read_text()) if paths.sysctl_saved.exists() else {}
    for key, value in SYSCTLS.items():
        f = Path("/proc/sys") / key
        if f.exists() and key not in saved:
            saved[key] = f.read_text().strip()
        if value is not None and f.exists():
            f.write_text(value)
    paths.sysctl_saved.write_text(json.dumps(saved))


def restore_sysctls(paths: Paths) -> None:
    if not paths.sysctl_saved.exists():
        return
    for key, value in json.loads(paths.sysctl_saved.read_text()).items():
        try:
            (Path("/proc/sys") / key).write_text(value)
        except OSError as e:
            log(f"could not restore {key}={value}: {e}")
    paths.sysctl_saved.unlink()


def make_bridge() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
    if NODE_IP not in sh("ip", "-br", "addr", "show", BRIDGE).stdout:
        sh("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        sh("ip", "link", "delete", BRIDGE)


def ours(rule: str) -> bool:
    """A rule this cluster added: kubelet's and kube-proxy's KUBE-* chains, the CNI bridge's rules for the
    `parathink` network (podman's own CNI-* rules name its network and stay)."""
    return "KUBE-" in rule or '\\"parathink\\"' in rule or '"parathink"' in rule


def remove_chains() -> None:
    """Every rule and chain of ours, in filter, nat and mangle: jumps first, then the chains themselves."""
    for table in ("filter", "nat", "mangle"):
        dump = sh("iptables-save", "-t", table, check=False).stdout.splitlines()
        chains = {line[1:].split()[0] for line in dump if line.startswith(":")}
        mine = {c for c in chains if c.startswith("KUBE-")}
        # CNI-<hash> chains that a rule of our network jumps to.
        for line in dump:
            if line.startswith("-A ") and ours(line) and " -j CNI-" in line:
                mine.add(line.split(" -j ")[1].split()[0])
        for line in dump:
            if not line.startswith("-A "):
                continue
            chain = line.split()[1]
            target = line.split(" -j ")[1].split()[0] if " -j " in line else ""
            if chain not in mine and (target in mine or ours(line)):
                sh("iptables", "-t", table, *_split("-D " + line[3:]), check=False)
        for chain in mine:
            sh("iptables", "-t", table, "-F", chain, check=False)
        for chain in mine:
            sh("iptables", "-t", table, "-X", chain, check=False)


def _split(rule: str) -> list[str]:
    import shlex
    return shlex.split(rule)


def unmount_below(root: Path) -> None:
    """Every mount below ``root`` (pod volumes, containerd's rootfs and shm mounts), deepest first."""
    for _ in range(3):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        mine = sorted({m for m in mounts if m == str(root) or m.startswith(f"{root}/")}, key=len, reverse=True)
        if not mine:
            return
        for m in mine:
            sh("umount", "-l", m, check=False)


# -- configuration ----------------------------------------------------------------------------------------------

def kubeconfig(paths: Paths, pki: Pki, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
    crt, key = pki.issue(name, user, groups)
    path = paths.root / f"{name}.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: parathink-local\n"
        f"clusters: [{{name: parathink-local, cluster: {{server: 'https://{NODE_IP}:{API_PORT}', "
        f"certificate-authority: '{pki.ca_path}'}}}}]\n"
        f"users: [{{name: {name}, user: {{client-certificate: '{crt}', client-key: '{key}'}}}}]\n"
        f"contexts: [{{name: parathink-local, context: {{cluster: parathink-local, user: {name}}}}}]\n")
    return path


def containerd_config(paths: Paths) -> Path:
    conf = paths.containerd / "config.toml"
    conf.write_text(f"""version = 2
root = "{paths.containerd / 'root'}"
state = "{paths.containerd / 'state'}"
[grpc]
  address = "{paths.sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This sandbox may not lower a process's oom_score_adj: without this, runc fails with "can't get final
  # child's PID from pipe".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{paths.cni / 'net.d'}"
""")
    (paths.cni / "net.d").mkdir(parents=True, exist_ok=True)
    (paths.cni / "net.d" / "10-parathink.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "parathink",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(paths.cni / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=1))
    return conf


def kubelet_config(paths: Paths, pki: Pki) -> Path:
    crt, key = pki.issue("kubelet-serving", f"system:node:{NODE}", ("system:nodes",), server=True,
                         hosts=(NODE_IP, NODE))
    conf = paths.root / "kubelet.yaml"
    conf.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(crt), "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca_path)}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "clusterDNS": [NODE_IP], "clusterDomain": "cluster.local",
        # The imported images are the only copies: never garbage-collected for disk space.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "serializeImagePulls": False, "maxPods": 50,
    }, indent=1))
    return conf


# -- the cluster ---------------------------------------------------------------------------------------------

def binaries() -> dict[str, Path]:
    found = {name: KUBE_BIN / name for name in
             ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "pause")}
    for name in ("etcd", "containerd", "ctr", "runc", "iptables", "podman"):
        found[name] = Path(shutil.which(name) or f"/usr/bin/{name}")
    missing = [n for n, p in found.items() if not os.access(p, os.X_OK)]
    if missing:
        raise ClusterError(f"{', '.join(missing)} not found (in {KUBE_BIN} and PATH): run `make kube-up`, which "
                           "installs and builds them")
    return found


def api_client(paths: Paths):
    from kubernetes import client, config
    return client.CoreV1Api(config.new_client_from_config(str(paths.admin_kubeconfig)))


def node_ready(paths: Paths) -> bool:
    node = api_client(paths).read_node(NODE)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def running(paths: Paths) -> bool:
    """Every component alive and the node Ready: `up` has nothing to do."""
    if any(read_pid(paths, name) is None for name in COMPONENTS) or not paths.admin_kubeconfig.exists():
        return False
    try:
        return node_ready(paths)
    except Exception:
        return False


def up(images: list[str]) -> Path:
    paths = Paths(CLUSTER_DIR)
    if running(paths):
        log("already running")
        changed = import_images(paths, binaries(), images)
        restart_pods_of(paths, changed)
        install(paths)
        return paths.admin_kubeconfig
    if any(read_pid(paths, name) for name in COMPONENTS):
        log("a part of an earlier cluster is running: stopping it first")
        down()
    started = time.monotonic()
    bins = binaries()
    for d in (paths.run, paths.logs, paths.containerd, paths.kubelet, paths.cni):
        d.mkdir(parents=True, exist_ok=True)
    for stale in (paths.pki, paths.etcd):
        shutil.rmtree(stale, ignore_errors=True)
    set_sysctls(paths)
    make_bridge()
    pki = Pki(paths.pki, days=30)
    try:
        # containerd first, and the images imported while the control plane and the node start: a fresh machine's
        # import (minutes: podman save + ctr import, mostly disk) no longer waits for them (about a minute, mostly CPU).
        start_containerd(paths, bins)
        importing = Background(import_images, paths, bins, images)
        start_control_plane(paths, pki, bins)
        start_node(paths, pki, bins)
        importing.result()
        advertise_gpu_pool(paths)
        install(paths)
    except BaseException:
        log(f"start failed; logs in {paths.logs}")
        raise
    log(f"cluster up in {time.monotonic() - started:.0f} s")
    return paths.admin_kubeconfig


def start_control_plane(paths: Paths, pki: Pki, bins: dict[str, Path]) -> None:
    etcd_url = f"http://127.0.0.1:{ETCD_PORT}"
    spawn(paths, "etcd", [bins["etcd"], "--name=parathink", f"--data-dir={paths.etcd}",
                          f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                          f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                          f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                          f"--initial-cluster=parathink=http://127.0.0.1:{ETCD_PEER_PORT}", "--log-level=warn"])
    wait(paths, "etcd", lambda: _get(f"{etcd_url}/health"))
    crt, key = pki.issue("apiserver", "kube-apiserver", server=True,
                         hosts=(NODE_IP, API_SERVICE_IP, "kubernetes", "kubernetes.default",
                                "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))
    kubelet_client = pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
    sa_key, sa_pub = pki.signing_key("service-account")
    admin = pki.issue("admin-client", "kubernetes-admin", ("system:masters",))
    kubeconfig(paths, pki, "admin", "kubernetes-admin", ("system:masters",))
    spawn(paths, "kube-apiserver", [
        bins["kube-apiserver"], f"--etcd-servers={etcd_url}", f"--bind-address={NODE_IP}",
        f"--advertise-address={NODE_IP}", f"--secure-port={API_PORT}", "--insecure-port=0",
        f"--cert-dir={paths.pki / 'apiserver'}", f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
        f"--client-ca-file={pki.ca_path}", f"--service-account-key-file={sa_pub}",
        f"--service-account-signing-key-file={sa_key}", "--service-account-issuer=https://kubernetes.default.svc",
        "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
        f"--kubelet-client-certificate={kubelet_client[0]}", f"--kubelet-client-key={kubelet_client[1]}",
        f"--kubelet-certificate-authority={pki.ca_path}", "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false", "--v=1"])
    wait(paths, "kube-apiserver", lambda: _get(f"https://{NODE_IP}:{API_PORT}/readyz", admin, pki.ca_path))
    cm = kubeconfig(paths, pki, "controller-manager", "system:kube-controller-manager")
    spawn(paths, "kube-controller-manager", [
        bins["kube-controller-manager"], f"--kubeconfig={cm}", "--leader-elect=false", "--port=0",
        "--bind-address=127.0.0.1", "--secure-port=10257", f"--cert-dir={paths.pki / 'controller-manager'}",
        f"--service-account-private-key-file={sa_key}", f"--root-ca-file={pki.ca_path}",
        "--use-service-account-credentials=true", f"--cluster-cidr={POD_CIDR}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--v=1"])
    sched = kubeconfig(paths, pki, "scheduler", "system:kube-scheduler")
    spawn(paths, "kube-scheduler", [
        bins["kube-scheduler"], f"--kubeconfig={sched}", "--leader-elect=false", "--port=0",
        "--bind-address=127.0.0.1", "--secure-port=10259", f"--cert-dir={paths.pki / 'scheduler'}",
        "--profiling=false", "--v=1"])
    wait(paths, "kube-controller-manager", lambda: _get("https://127.0.0.1:10257/healthz", verify=False))
    wait(paths, "kube-scheduler", lambda: _get("https://127.0.0.1:10259/healthz", verify=False))


class Background(threading.Thread):
    """``fn(*args)`` in a thread; ``result()`` waits for it and returns its value or raises what it raised."""

    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args, self.value, self.error = fn, args, None, None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:  # re-raised in the caller's thread by result()
            self.error = e

    def result(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def start_containerd(paths: Paths, bins: dict[str, Path]) -> None:
    spawn(paths, "containerd", [bins["containerd"], f"--config={containerd_config(paths)}"])
    wait(paths, "containerd", lambda: ctr(paths, "version", check=False).returncode == 0)


def start_node(paths: Paths, pki: Pki, bins: dict[str, Path]) -> None:
    """The kubelet and what the node's pods need beside it (containerd runs already: start_containerd)."""
    import_pause(paths, bins)
    kubelet_kubeconfig = kubeconfig(paths, pki, "kubelet", f"system:node:{NODE}", ("system:nodes",))
    pool = gpu_pool()
    labels = ",".join(f"{k}={v}" for k, v in pool["node_pool"]["node_selector"].items())
    spawn(paths, "kubelet", [
        bins["kubelet"], f"--config={kubelet_config(paths, pki)}", f"--kubeconfig={kubelet_kubeconfig}",
        "--container-runtime=remote", f"--container-runtime-endpoint=unix://{paths.sock}",
        f"--root-dir={paths.kubelet}", f"--node-ip={NODE_IP}", f"--hostname-override={NODE}",
        f"--node-labels={labels}", f"--pod-infra-container-image={PAUSE_IMAGE}",
        "--v=1"])
    wait(paths, "kubelet", lambda: node_ready(paths), "Ready")
    proxy = kubeconfig(paths, pki, "kube-proxy", "system:kube-proxy")
    spawn(paths, "kube-proxy", [
        bins["kube-proxy"], f"--kubeconfig={proxy}", "--proxy-mode=iptables", f"--cluster-cidr={POD_CIDR}",
        f"--hostname-override={NODE}", "--bind-address=127.0.0.1", "--healthz-bind-address=127.0.0.1:10256",
        "--metrics-bind-address=127.0.0.1:10249", "--conntrack-max-per-core=0", "--masquerade-all", "--v=1"])
    wait(paths, "kube-proxy", lambda: _get("http://127.0.0.1:10256/healthz"))
    spawn(paths, "dns", [sys.executable, HERE / "cluster_dns.py", NODE_IP, paths.admin_kubeconfig])
    wait(paths, "dns", lambda: _dns_ok())


def gpu_pool() -> dict:
    import yaml
    return yaml.safe_load((ROOT / "hydra_conf" / "cluster" / "gpu.yaml").read_text())


def advertise_gpu_pool(paths: Paths) -> None:
    """The pool's GPUs as the device plugin would advertise them: an extended resource in the node's capacity.
    Fake: the node has no GPU, the pods placed on it run CPU containers."""
    pool = gpu_pool()
    count = str(pool["gpus_per_node"])
    patch = [{"op": "add", "path": f"/status/capacity/{pool['gpu_resource'].replace('/', '~1')}", "value": count}]
    api = api_client(paths)
    api.api_client.call_api(f"/api/v1/nodes/{NODE}/status", "PATCH", body=patch,
                            header_params={"Content-Type": "application/json-patch+json"},
                            auth_settings=["BearerToken"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (api.read_node(NODE).status.allocatable or {}).get(pool["gpu_resource"]) == count:
            return
        time.sleep(0.5)
    raise ClusterError(f"the node does not show {count} {pool['gpu_resource']} as allocatable")


def install(paths: Paths) -> None:
    """The namespace, the stand-ins of the managed services and the chart (local_install.py)."""
    sys.path.insert(0, str(HERE))
    from local_install import install as install_chart
    t0 = time.monotonic()
    install_chart(paths.admin_kubeconfig)
    log(f"chart installed, MLflow Ready ({time.monotonic() - t0:.0f} s)")


# -- images -------------------------------------------------------------------------------------------------

def ctr(paths: Paths, *args, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return sh("ctr", f"--address={paths.sock}", f"--namespace={NAMESPACE}", *args, check=check, **kw)


def import_pause(paths: Paths, bins: dict[str, Path]) -> None:
    """The sandbox image, from the pause.c that mk/kube.mk compiled (as k8s.gcr.io/pause:3.2 is built)."""
    if PAUSE_IMAGE in ctr(paths, "images", "ls", "-q").stdout.split():
        return
    ctx = paths.root / "pause-build"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir()
    shutil.copy(bins["pause"], ctx / "pause")
    (ctx / "Containerfile").write_text('FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n')
    sh("podman", "build", "--quiet", "--tag", PAUSE_IMAGE, str(ctx))
    archive = ctx / "pause.tar"
    sh("podman", "save", "--quiet", "--format", "docker-archive", "-o", archive, PAUSE_IMAGE)
    ctr(paths, "images", "import", archive)
    shutil.rmtree(ctx)


def image_id_in_containerd(paths: Paths, ref: str) -> str | None:
    """The config digest (what podman calls the image ID) of ``ref`` in containerd, or None."""
    rows = [line.split() for line in ctr(paths, "images", "ls").stdout.splitlines()[1:]]
    digest = next((r[2] for r in rows if r and r[0] == ref), None)
    if digest is None:
        return None
    manifest = json.loads(ctr(paths, "content", "get", digest).stdout)
    return manifest["config"]["digest"]


def restart_pods_of(paths: Paths, refs: list[str]) -> None:
    """Pods of a Deployment that run one of ``refs`` (re-imported under the same tag): deleted, so that their
    Deployment starts them again from the new image."""
    if not refs:
        return
    api = api_client(paths)
    for pod in api.list_pod_for_all_namespaces().items:
        images = {c.image for c in pod.spec.containers + (pod.spec.init_containers or [])}
        if images & set(refs) and pod.metadata.owner_references:
            api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)


def import_images(paths: Paths, bins: dict[str, Path], refs: list[str]) -> list[str]:
    """Each podman image in ``refs`` into containerd under the same name, unless containerd holds that very image
    (same config digest) already: `podman save` + `ctr images import` take a minute per GB. Returns those
    imported."""
    changed = []
    for ref in refs:
        proc = sh("podman", "image", "inspect", "--format", "{{.Id}}", ref, check=False)
        if proc.returncode != 0:
            raise ClusterError(f"image {ref} not found in podman: run `make images` first")
        want = f"sha256:{proc.stdout.strip()}"
        if image_id_in_containerd(paths, ref) == want:
            continue
        t0 = time.monotonic()
        archive = paths.root / "import.tar"
        sh("podman", "save", "--quiet", "--format", "docker-archive", "-o", archive, ref)
        try:
            ctr(paths, "images", "import", archive)
        finally:
            archive.unlink(missing_ok=True)
        got = image_id_in_containerd(paths, ref)
        if got != want:
            raise ClusterError(f"{ref}: containerd holds {got} after the import, podman {want}")
        log(f"imported {ref} ({time.monotonic() - t0:.0f} s)")
        changed.append(ref)
    return changed


# -- down -----------------------------------------------------------------------------------------------------

def down() -> None:
    paths = Paths(CLUSTER_DIR)
    t0 = time.monotonic()
    pids = {name: read_pid(paths, name) for name in COMPONENTS}
    # No controller recreates a pod and no scheduler places one while the pods go.
    for name in ("kube-controller-manager", "kube-scheduler"):
        if pids[name]:
            stop_pid(pids[name])
    if pids["kube-apiserver"] and pids["kubelet"] and pids["containerd"]:
        delete_all_pods(paths)
    for name in reversed(COMPONENTS):
        if pids[name] and name not in ("kube-controller-manager", "kube-scheduler"):
            if name == "kube-proxy":
                stop_pid(pids[name])
                sh(KUBE_BIN / "kube-proxy", "--cleanup", check=False)
            elif name == "containerd":
                kill_leftover_containers(paths)
                stop_pid(pids[name])
            else:
                stop_pid(pids[name])
    kill_shims(paths)
    for name in COMPONENTS:
        paths.pidfile(name).unlink(missing_ok=True)
    unmount_below(paths.root)
    unmount_below(Path("/run/containerd/io.containerd.runtime.v2.task") / NAMESPACE)
    remove_chains()
    remove_bridge()
    restore_sysctls(paths)
    for d in (paths.kubelet, paths.etcd, paths.cni / "ipam", paths.containerd / "state"):
        shutil.rmtree(d, ignore_errors=True)
    log(f"cluster down in {time.monotonic() - t0:.0f} s")


def delete_all_pods(paths: Paths) -> None:
    """Through the API, so that the kubelet tears each sandbox down (CNI DEL: addresses, rules) before it stops."""
    try:
        api = api_client(paths)
        for pod in api.list_pod_for_all_namespaces().items:
            api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ctr(paths, "tasks", "ls", "-q", check=False).stdout.strip():
            time.sleep(1)
    except Exception as e:
        log(f"deleting the pods through the API failed ({e}); killing their containers")


def kill_leftover_containers(paths: Paths) -> None:
    for task in ctr(paths, "tasks", "ls", "-q", check=False).stdout.split():
        ctr(paths, "tasks", "kill", "-s", "SIGKILL", task, check=False)
        time.sleep(0.2)
        ctr(paths, "tasks", "delete", task, check=False)
    for container in ctr(paths, "containers", "ls", "-q", check=False).stdout.split():
        ctr(paths, "containers", "delete", container, check=False)


def kill_shims(paths: Paths) -> None:
    """containerd's runc shims of this cluster's containerd (they outlive it by design), by PID."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(paths.sock).encode() in b" ".join(argv):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- helpers ----------------------------------------------------------------------------------------------------

def _get(url: str, cert: tuple[Path, Path] | None = None, verify: Path | bool = True) -> bool:
    import ssl
    import urllib.request
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=str(verify)) if isinstance(verify, Path) else \
            ssl.create_default_context()
        if verify is False:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        if cert:
            ctx.load_cert_chain(*map(str, cert))
    with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
        return r.status == 200


def _dns_ok() -> bool:
    sys.path.insert(0, str(HERE))
    from cluster_dns import query
    return query(NODE_IP, "kubernetes.default.svc.cluster.local") == API_SERVICE_IP


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("up", "down", "status"):
        print("usage: local_cluster.py up [IMAGE...] | down | status", file=sys.stderr)
        return 2
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "images" / "offline" / "containers.conf"))
    if os.geteuid() != 0:
        print("local_cluster.py: needs root (kubelet, containerd, bridges, iptables)", file=sys.stderr)
        return 2
    try:
        if argv[0] == "up":
            print(up(argv[1:]))
        elif argv[0] == "down":
            down()
        else:
            print("running" if running(Paths(CLUSTER_DIR)) else "stopped")
    except ClusterError as e:
        print(f"local_cluster.py {argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""tests/e2e: the images `make images` built, run with podman, and the real single-node cluster of `make kube-up`
(local_cluster.py), started for the session when it is not running and stopped at the end only if this session
started it (a developer's `make kube-up` cluster stays up). make test builds the images and the Kubernetes
binaries first (TEST_DEPS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# podman's settings for this sandbox (mk/images.mk exports the same; here for a pytest run outside make).
os.environ.setdefault("CONTAINERS_CONF", str(HERE.parents[1] / "images" / "offline" / "containers.conf"))

from built_images import ref  # noqa: E402

CLUSTER_IMAGES = ("trainer-cpu", "mlflow", "postgres-offline", "s3-offline")


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: needs `make images` (and the local cluster: `make kube-up`, or this "
                                       "folder's fixture starts it); make test builds what they need first")


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    import local_cluster

    was_running = local_cluster.running(local_cluster.Paths(local_cluster.CLUSTER_DIR))
    proc = subprocess.run([sys.executable, HERE / "local_cluster.py", "up", *map(ref, CLUSTER_IMAGES)],
                          capture_output=True, text=True, timeout=1800)
    # What `up` did and how long each part took (imports, chart), kept beside the components' logs.
    logs = local_cluster.CLUSTER_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "up.log").write_text(proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"local_cluster.py up exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    yield Path(proc.stdout.strip().splitlines()[-1])
    if not was_running:
        subprocess.run([sys.executable, HERE / "local_cluster.py", "down"], timeout=300, check=True)


@pytest.fixture(scope="session")
def api(kubeconfig):
    from kubernetes import config
    return config.new_client_from_config(str(kubeconfig))

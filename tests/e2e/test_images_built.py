"""The images `make images` built (make test builds them first: TEST_DEPS), run with podman: tagged with the
package version and the git commit, the host's pip configuration in no layer, the mlflow image's own default
command serving, the orchestrator planning without torch, the CPU trainer running a stage. Stand-in: on this
machine the Python base and the Airflow image are images/offline's (no registry); tests/deploy/test_images.py
checks the Dockerfiles' text and the orchestrator's plan venv without podman."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from built_images import PREFIX, ROOT, version

pytestmark = [pytest.mark.e2e]
IMAGES = ("trainer-cpu", "orchestrator", "mlflow")


def podman(*args: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    assert not check or proc.returncode == 0, f"podman {' '.join(args)}: {proc.stderr[-2000:]}"
    return proc


@pytest.mark.parametrize("name", IMAGES)
def test_image_is_tagged_with_version_commit_and_latest(name):
    ids = {tag: podman("image", "inspect", "--format", "{{.Id}}", f"{PREFIX}/{name}:{tag}", check=False)
           for tag in (version(), "latest")}
    assert all(p.returncode == 0 for p in ids.values()), f"{name}: run `make images`"
    assert len({p.stdout for p in ids.values()}) == 1
    # The commit tag names the checkout the image was built from; HEAD may have moved since (a later commit).
    tags = json.loads(podman("image", "inspect", f"{PREFIX}/{name}:{version()}").stdout)[0]["RepoTags"]
    assert any(t.rsplit(":", 1)[1] not in (version(), "latest") and len(t.rsplit(":", 1)[1]) == 12 for t in tags), tags


@pytest.mark.parametrize("name", ("trainer-cpu", "orchestrator"))
def test_the_image_knows_what_it_was_built_from(name):
    """PARATHINK_BUILD_INPUTS in the image's environment is its inputs key (the label images/build.sh compares to
    skip a rebuild): the code identity its pods' lineage and the nightly read."""
    config = json.loads(podman("image", "inspect", f"{PREFIX}/{name}:{version()}").stdout)[0]["Config"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env.get("PARATHINK_BUILD_INPUTS") == "sha256:" + config["Labels"]["io.parathink.inputs"], env


@pytest.mark.parametrize("name", IMAGES)
def test_no_pip_configuration_in_any_layer(name):
    """pip's configuration reached the builds as volumes only: no pip.conf with content, no file of the host's
    local indexes (buildah leaves a volume's mount point behind as an empty folder: names, no content)."""
    ref = f"{PREFIX}/{name}:{version()}"
    history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", ref).stdout
    assert "/opt/pypi" not in history and "extra-index-url" not in history
    probe = podman("run", "--rm", "--entrypoint", "sh", ref, "-c",
                   "cat /etc/pip.conf /etc/xdg/pip/pip.conf /root/.config/pip/pip.conf 2>/dev/null; "
                   "find /opt/pypi /opt/pypi-more /opt/wheels -type f 2>/dev/null | head -1", check=False).stdout
    assert probe.strip() == "", probe


def test_mlflow_image_serves_with_its_own_default_command():
    """Issue 28, item 9: as uid 1000 in `/` the old default could not create mlflow.db."""
    name = f"mlflow-default-{uuid.uuid4().hex[:6]}"
    podman("run", "-d", "--name", name, f"{PREFIX}/mlflow:{version()}")
    try:
        probe = ("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=2)"
                 ".read().decode())")
        deadline, out = time.monotonic() + 180, None
        while time.monotonic() < deadline:
            out = podman("exec", name, "/opt/mlflow/bin/python", "-c", probe, check=False)
            if out.returncode == 0:
                break
            assert podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true", \
                podman("logs", name).stderr[-2000:]
            time.sleep(2)
        assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-1000:]
        assert podman("exec", name, "id", "-u").stdout.strip() == "1000"
    finally:
        podman("rm", "-f", "-t", "1", name, check=False)


def test_orchestrator_plans_without_torch():
    ref = f"{PREFIX}/orchestrator:{version()}"
    out = podman("run", "--rm", "--entrypoint", "/opt/parathink/bin/parathink", ref, "plan",
                 "experiment=parallel_r1_seen", "stages=[teacher,filter]").stdout
    assert json.loads(out)["placement"]["teacher"]["gpus_per_node"] == 8
    airflow = podman("run", "--rm", "--entrypoint", "airflow", ref, "version").stdout.strip()
    pins = (ROOT / "images" / "orchestrator" / "requirements.txt").read_text()
    assert airflow == pins.split("apache-airflow==")[1].split()[0]
    assert podman("run", "--rm", "--entrypoint", "id", ref, "-u").stdout.strip() == "50000"
    # The providers of the DAG's pods and of remote task logs in S3 (helm/airflow-values.yaml).
    podman("run", "--rm", "--entrypoint", "python3", ref, "-c",
           "import airflow.providers.cncf.kubernetes, airflow.providers.amazon")

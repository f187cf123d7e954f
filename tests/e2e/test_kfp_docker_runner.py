"""`parathink kfp run --local --runner docker`: the compiled pipeline's tasks run by kfp.local's DockerRunner, each in
the CPU trainer image that `make images` built, through podman's Docker-compatible API (`podman system service`,
started here on a socket of the test's own and stopped at the end). Nothing is a stand-in but the image's base
(images/offline: no registry here); Docker itself is not installed on this machine, podman answers for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from built_images import ref

# tests/kfp's cheap teacher -> filter (tracking=none: MLflow's SQLite file would land in the container's cwd).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kfp"))
from kfp_helpers import CHEAP

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PARATHINK = [sys.executable, "-m", "parathink.cli"]


@pytest.fixture(scope="module")
def podman_api(tmp_path_factory):
    """podman's Docker API on a unix socket (DOCKER_HOST for docker-py, the client kfp.local uses) and its events file."""
    folder = tmp_path_factory.mktemp("podman")
    sock = folder / "docker.sock"
    # Container events to a file of the test's own (the default, journald, keeps none in this sandbox): the test
    # reads which image each task's container started from. podman 4.3 reads one CONTAINERS_CONF: the suite's
    # (images/offline/containers.conf, set by conftest.py) with the events settings added to its [engine] table.
    conf = folder / "containers.conf"
    events = folder / "events.log"
    suite = Path(os.environ["CONTAINERS_CONF"]).read_text()
    conf.write_text(suite.replace("[engine]\n", f'[engine]\nevents_logger = "file"\nevents_logfile_path = "{events}"\n'))
    assert "events_logger" in conf.read_text(), f"no [engine] table in {os.environ['CONTAINERS_CONF']}"
    saved, os.environ["CONTAINERS_CONF"] = os.environ["CONTAINERS_CONF"], str(conf)
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert service.poll() is None, f"podman system service exited: {service.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "podman system service: no socket after 60 s"
        time.sleep(0.2)
    yield f"unix://{sock}", events
    service.terminate()
    service.wait(timeout=30)
    os.environ["CONTAINERS_CONF"] = saved


def kfp_run(tmp_path: Path, docker_host: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": docker_host}
    return subprocess.run([*PARATHINK, "kfp", "run", "--local", "--runner", "docker", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def started_images(events: Path) -> list[str]:
    """The image of every container podman started since the service began (its events file, one JSON a line)."""
    rows = [json.loads(line) for line in events.read_text().splitlines() if line.strip()] if events.exists() else []
    return [row["Image"] for row in rows if row.get("Status") == "start"]


def container_events(events: Path, status: str) -> list[str]:
    """The IDs of the containers with a ``status`` event ("start", "remove") since the service began."""
    rows = [json.loads(line) for line in events.read_text().splitlines() if line.strip()] if events.exists() else []
    return [row["ID"] for row in rows if row.get("Status") == status and row.get("Type", "container") == "container"]


def test_stages_run_in_the_trainer_image_and_a_gate_failure_stops_the_pipeline(tmp_path, podman_api):
    docker_host, events = podman_api
    image = ref("trainer-cpu")
    run_dir = tmp_path / "runs" / "r"
    proc = kfp_run(tmp_path, docker_host, *CHEAP, f"cluster.image={image}", f"run_dir={run_dir}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Each stage ran inside a container of the image and wrote the run directory through the bind-mounted
    # pipeline root, as this user (the files on this machine are ours).
    for stage in ("teacher", "filter"):
        manifest = run_dir / stage / "_manifest.json"
        assert json.loads(manifest.read_text())["stage"] == stage
        assert manifest.stat().st_uid == os.getuid()
    assert (run_dir / "filter" / "accepted.jsonl").stat().st_size > 0
    assert started_images(events) == [image, image], "expected one container of the image per task"

    # A gate that cannot pass: exit 3 from inside the container reaches the command, as with `parathink run`.
    gated = kfp_run(tmp_path, docker_host, *CHEAP, f"cluster.image={image}", f"run_dir={run_dir}",
                    "filter.gate.min_accepted=100000")
    assert gated.returncode == 3, gated.stdout[-3000:] + gated.stderr[-3000:]
    assert gated.stderr.strip().splitlines()[-1] == "parathink: error: the pipeline stopped at stage filter (exit 3)"
    # The failed task's whole log reached this process, its last line included (podman removes an auto-removed
    # container at exit, before kfp 2.16 has read its status or the end of its log: kfp then called it a success),
    # and every container was removed once read.
    assert "parathink-kfp: stage filter exited 3" in gated.stdout, gated.stdout[-3000:]
    assert sorted(container_events(events, "remove")) == sorted(container_events(events, "start"))


def test_a_run_dir_the_containers_cannot_see_is_refused_in_one_line(tmp_path, podman_api):
    docker_host, _ = podman_api
    outside = tmp_path / "elsewhere"
    proc = kfp_run(tmp_path, docker_host, *CHEAP, f"cluster.image={ref('trainer-cpu')}",
                   f"run_dir={tmp_path / 'runs' / 'r'}", "--pipeline-root", str(outside))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "outside --pipeline-root" in proc.stderr, proc.stderr
    assert not outside.exists() and not (tmp_path / "runs").exists()

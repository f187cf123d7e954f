"""``parathink kfp run --local``: the compiled pipeline's tasks run on this machine through ``kfp.local``.

Two runners, chosen with ``--runner``:

- ``subprocess`` (default): ``SubprocessRunner(use_venv=False)`` runs each lightweight component in a subprocess
  of this Python (no image, no pip install), in task order.
- ``docker``: ``DockerRunner`` runs each task in its image (the cluster profile's ``image``, e.g.
  ``cluster.image=localhost/parathink/trainer-cpu:<version>``) through the Docker API at ``DOCKER_HOST``: Docker, or
  podman's compatible service (``podman system service``). The container sees one folder of this machine, the
  pipeline root, bind-mounted at the same path, so the run directory must lie under it (or be an ``s3://`` URI):
  the default pipeline root is then the run directory's parent. It runs as this user (files it writes stay
  ours) on the host's network (an MLflow or S3 endpoint on 127.0.0.1 is reachable as it is from here).

The Kubernetes settings (GPUs, node pools, /dev/shm, Secrets, limits) are ignored locally; everything else is the
pipeline that a cluster runs.

``kfp.local`` reports only that a task failed. The component prints ``parathink-kfp: stage NAME exited CODE`` as
its last line, and kfp.local copies each task's output to this process's stdout, so the run's exit code is read
from there: a gate failure exits 3 here too, as with ``parathink run``.

kfp 2.16's DockerRunner starts each container with ``auto_remove=True``. podman (and Docker, when a task is quick)
removes it the moment it exits, before kfp has read its exit status or the last lines of its log; kfp then reads
the missing container as exit 0, so a failed stage "succeeded" and the next task found no output. The docker
runner here therefore starts each task's container itself, kept until its status and whole log are read
(``_run_kept``), in place of kfp's ``run_docker_container``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from pathlib import Path

from parathink.errors import ConfigError
from parathink.kfp.plan import Plan

STAGE_EXIT = re.compile(r"^\s*parathink-kfp: stage (\S+) exited (\d+)", re.MULTILINE)  # kfp.local indents logs


class _Tee(io.TextIOBase):
    """Writes through to ``stream`` and keeps the components' exit lines (kfp.local prints each log line whole)."""

    def __init__(self, stream):
        self.stream, self.exits = stream, []

    def write(self, text: str) -> int:
        self.exits += STAGE_EXIT.findall(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def local_run_dir(run_dir: str) -> str:
    """An absolute path (tasks run as subprocesses; an s3:// URI is used as it is)."""
    return run_dir if "://" in run_dir else str(Path(run_dir).resolve())


RUNNERS = ("subprocess", "docker")


def default_pipeline_root(run_dir: str, runner: str) -> str:
    """kfp.local's own outputs: beside the run directory, or (docker) its parent, the one folder a container sees."""
    parent = Path(local_run_dir(run_dir)).parent
    return str(parent if runner == "docker" and "://" not in run_dir else parent / ".kfp-local")


def check_visible(run_dir: str, pipeline_root: str) -> None:
    """A docker task writes the run directory inside its container: refuse one the container cannot see."""
    if "://" in run_dir:
        return
    root, path = Path(pipeline_root).resolve(), Path(local_run_dir(run_dir))
    if not path.is_relative_to(root):
        raise ConfigError(f"run_dir {path} is outside --pipeline-root {root}, the only folder of this machine a "
                         "docker task sees; put the run directory under it or use an s3:// run_dir")


def _runner(kind: str):
    from kfp import local

    if kind == "subprocess":
        return local.SubprocessRunner(use_venv=False)
    if kind == "docker":
        # kfp passes these to docker-py's containers.run. The trainer image's ENTRYPOINT is `parathink`, and kfp
        # sets the task's command as the container's CMD (on Kubernetes it replaces the entrypoint): env runs
        # the command as given.
        return local.DockerRunner(network_mode="host", user=f"{os.getuid()}:{os.getgid()}",
                                  entrypoint=["/usr/bin/env"])
    raise ConfigError(f"--runner: must be one of {', '.join(RUNNERS)}, got {kind!r}")


def _run_kept(client, image: str, command: list[str], volumes: dict, **run_args) -> int:
    """kfp's ``run_docker_container`` without auto-remove: the container's log to stdout, its exit status, then
    the container removed (its exit status and full log are read first)."""
    import docker

    try:
        client.images.get(image)  # a local-only tag (localhost/...) is used as it is
    except docker.errors.ImageNotFound:
        client.images.pull(image)
    container = client.containers.create(image=image, command=command, volumes=volumes, **run_args)
    try:
        container.start()
        for line in container.logs(stream=True, follow=True):
            sys.stdout.write(line.decode(errors="replace"))
        return int(container.wait()["StatusCode"])
    finally:
        container.remove(force=True)


@contextlib.contextmanager
def _containers_kept(runner: str):
    """While a docker run lasts, kfp's DockerRunner starts each task through ``_run_kept``."""
    if runner != "docker":
        yield
        return
    from kfp.local import docker_task_handler

    original = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = _run_kept
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = original


def run(plan: Plan, pipeline_root: str, runner: str = "subprocess") -> int:
    """Run ``plan``'s pipeline with kfp.local; the exit code of the stage that failed, or 0."""
    from kfp import local

    from parathink.kfp.pipeline import build

    if runner == "docker":
        check_visible(plan.run_dir, pipeline_root)
    local.init(runner=_runner(runner), pipeline_root=str(Path(pipeline_root).resolve()), raise_on_error=True)
    pipeline = build(plan)
    tee = _Tee(sys.stdout)
    stopped = False
    with warnings.catch_warnings():
        # kfp.local warns for every task whose image name lacks "python"; the trainer image is not used locally.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        try:
            with contextlib.redirect_stdout(tee), _containers_kept(runner):
                pipeline(run_dir=local_run_dir(plan.run_dir))
        except RuntimeError:  # kfp.local's message names the task; the stage's own message is in the log above
            stopped = True
    if stopped:
        stage, code = tee.exits[-1] if tee.exits else ("(unknown)", "1")
        print(f"parathink: error: the pipeline stopped at stage {stage} (exit {code})", file=sys.stderr)
        return int(code)
    return 0

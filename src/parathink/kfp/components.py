"""One KFP lightweight component per curriculum stage, all with the same body: run ``parathink stage NAME``.

Lightweight (not container) components, because ``kfp.local.SubprocessRunner`` refuses container components and
the same definition must run on a cluster (in the trainer image, ``base_image`` set per task from the cluster
profile) and on this machine (``kfp.local``, in the current venv). ``install_kfp_package=False``: the trainer
image carries kfp (the executor needs it) and a pod never pip-installs at start.

The task's inputs are compiled in, but for ``run_dir`` (the task before it hands it on) and ``run_id`` (KFP's
run uuid, ``dsl.PIPELINE_JOB_ID_PLACEHOLDER``, which keys the task's verdict: :mod:`parathink.kfp.verdict`).

One process per GPU: the body calls ``parathink stage NAME``, which starts the ranks of its placement's launch
(``placement.<stage>.launch``: ``torchrun --nproc_per_node 8 ...`` for a stage on an 8-GPU node) as torchrun's agent
and exits with the ranks' own code (parathink.launch; torchrun's own exit code would be 1 for a failed gate too, and
exit 1 is retried here, a gate's exit 3 never). A multi-node stage's body runs ``parathink kfp trainjob``, whose
TrainJob runs the launch.

The ten components differ only by name, so they are built from one function instead of ten copied files
(``components/README.md`` explains the layout). No ``from __future__ import annotations``: kfp reads the body's
annotations as types, not strings.
"""

import dataclasses
from functools import cache
from typing import List

from kfp import dsl

from parathink.stages import CURRICULUM

# Every stage that can be a pipeline task: the curriculum's stages and promote (docs/design.md, "The curriculum").
STAGES = CURRICULUM
# Placeholder: the pipeline sets each task's image from its placement (the profile's trainer image).
DEFAULT_IMAGE = "parathink-trainer:0.1.0"


def parathink_stage(stage: str, run_dir: str, overrides: List[str], trainjob: bool, retries: int,
                    retry_backoff_s: int, run_id: str) -> str:
    """Run ``parathink stage STAGE run_dir=RUN_DIR OVERRIDES`` (``trainjob``: ``parathink kfp trainjob``, which runs
    it on several nodes) and return the run directory, which the next task reads its inputs from.

    Two layers of retries. Here, in the task's process: exit 1 is run again after ``retry_backoff_s``, up to
    ``retries`` times; 2 (bad input) and 3 (a gate failed) never. KFP's retry policy, set on every task, covers what
    this process cannot: a lost pod (preempted, evicted, OOM-killed), which ends this process too. But KFP retries
    every failure, so a final exit (1 with its retries spent, 2, 3) is first recorded as the task's verdict in the
    run directory (``run_id``: the KFP run; :mod:`parathink.kfp.verdict`), and a KFP retry of this task that finds
    it exits with the same code at once, without running the stage again.
    This source is copied into the compiled pipeline and runs in the task's container (the trainer image, which
    has parathink): it imports only the verdict module; the stage itself runs in a subprocess.
    """
    import os
    import subprocess
    import sys
    import time

    from parathink.kfp import verdict

    meaning = {1: "error, its retries spent", 2: "bad input, not retried",
               3: "a data-quality gate failed, not retried; its report is named above"}
    earlier = verdict.recorded(run_dir, run_id, stage)
    if earlier is not None:
        print(f"parathink-kfp: stage {stage} exited {earlier} earlier in this KFP run ({meaning[earlier]}); "
              "this retry of the task does not run it again", flush=True)
        sys.exit(earlier)
    command = ["kfp", "trainjob"] if trainjob else ["stage"]
    argv = [sys.executable, "-m", "parathink.cli", *command, stage, f"run_dir={run_dir}", *overrides]
    # the same run id names the stage's MLflow run's KFP run (tracking.lineage's kfp.run_id tag)
    env = {**os.environ, "PARATHINK_KFP_RUN_ID": run_id}
    for attempt in range(1, retries + 2):
        code = subprocess.call(argv, env=env)
        if code != 1 or attempt > retries:
            break
        print(f"parathink-kfp: stage {stage} exited 1 (attempt {attempt} of {retries + 1}); "
              f"retrying in {retry_backoff_s} s", flush=True)
        time.sleep(retry_backoff_s)
    if code != 0:
        if code < 0:  # killed by a signal (the OOM killer's SIGKILL): reported as a shell does, 128 + the signal
            code = 128 - code
        if verdict.is_final(code):
            verdict.record(run_dir, run_id, stage, code)
        print(f"parathink-kfp: stage {stage} exited {code} "
              f"({meaning.get(code, 'stopped from outside; a KFP retry of the task runs it again')})", flush=True)
        sys.exit(code)
    return run_dir


@cache
def _base() -> dsl.base_component.BaseComponent:
    return dsl.component(parathink_stage, base_image=DEFAULT_IMAGE, install_kfp_package=False)


@cache
def stage_component(stage: str):
    """The component of ``stage``: the shared body under the stage's name (the name KFP shows and keys tasks by)."""
    if stage not in STAGES:
        raise ValueError(f"no component for stage {stage!r} (known: {', '.join(STAGES)})")
    base = _base()
    spec = dataclasses.replace(base.component_spec, name=stage)
    return type(base)(component_spec=spec, python_func=parathink_stage)

"""One KFP lightweight component per curriculum stage, all with the same body: run ``parathink stage NAME``.

Lightweight (not container) components, because ``kfp.local.SubprocessRunner`` refuses container components and
the same definition must run on a cluster (in the trainer image, ``base_image`` set per task from the cluster
profile) and on this machine (``kfp.local``, in the current venv). ``install_kfp_package=False``: the trainer
image carries kfp (the executor needs it) and a pod never pip-installs at start.

One process per GPU: the body calls ``parathink stage NAME``, which starts the ranks of its placement's launch
(``placement.<stage>.launch``: ``torchrun --nproc_per_node 8 ...`` for a stage on an 8-GPU node) as torchrun's agent
and exits with the ranks' own code (parathink.launch; torchrun's own exit code would be 1 for a failed gate too, and
exit 1 is retried here). A multi-node stage's body runs ``parathink kfp trainjob``, whose TrainJob runs the launch.

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
                    retry_backoff_s: int) -> str:
    """Run ``parathink stage STAGE run_dir=RUN_DIR OVERRIDES`` (``trainjob``: ``parathink kfp trainjob``, which runs
    it on several nodes) and return the run directory, which the next task reads its inputs from.

    KFP's own retry policy retries every failure, but only exit code 1 may be retried (2: bad input, 3: a gate
    failed); so the retries happen here, on exit code 1 alone, and the pipeline sets no KFP retry policy.
    This source is copied into the compiled pipeline and runs in the task's container: it imports nothing of ours.
    """
    import subprocess
    import sys
    import time

    command = ["kfp", "trainjob"] if trainjob else ["stage"]
    argv = [sys.executable, "-m", "parathink.cli", *command, stage, f"run_dir={run_dir}", *overrides]
    for attempt in range(1, retries + 2):
        code = subprocess.call(argv)
        if code != 1 or attempt > retries:
            break
        print(f"parathink-kfp: stage {stage} exited 1 (attempt {attempt} of {retries + 1}); "
              f"retrying in {retry_backoff_s} s", flush=True)
        time.sleep(retry_backoff_s)
    if code != 0:
        meaning = {2: "bad input, not retried", 3: "a data-quality gate failed, not retried; its report is named above"}
        print(f"parathink-kfp: stage {stage} exited {code} ({meaning.get(code, 'error')})", flush=True)
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

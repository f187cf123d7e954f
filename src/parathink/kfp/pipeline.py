"""The curriculum as one KFP v2 pipeline: the experiment's stages chained in order, each task placed from the
cluster profile, so one definition serves the local profile and the GPU one.

Each task takes the run directory from the task before it (its output) and hands it on: the run directory is the
only hand-over between stages (docs/orchestration.md), and the data dependency gives KFP the order. A task that
fails (exit 3: a gate) stops the pipeline there; nothing after it runs. The pipeline's one parameter is
``run_dir``; every other setting is compiled in, because placement (GPUs, node pools) depends on it.
(No ``from __future__ import annotations``: kfp reads the pipeline function's annotations as types.)
"""

from pathlib import Path

from kfp import compiler, dsl

from parathink.kfp.components import stage_component
from parathink.kfp.plan import Plan
from parathink.kfp.tasks import place, retry_lost_pods
from parathink.placement import podspec


def pipeline_name(experiment: str) -> str:
    # KFP pipeline names are lowercase letters, digits and dashes.
    return "parathink-" + experiment.lower().replace("_", "-")


def build(plan: Plan):
    """The pipeline function for ``plan`` (a GraphComponent: compile it, or call it under ``kfp.local``)."""

    @dsl.pipeline(name=pipeline_name(plan.experiment),
                  description=f"parathink curriculum: experiment={plan.experiment} seed={plan.seed}, "
                              f"stages {' -> '.join(plan.stages)}")
    def curriculum(run_dir: str = plan.run_dir) -> str:
        previous = run_dir
        for stage in plan.stages:
            p = plan.placements[stage]
            task = stage_component(stage)(stage=stage, run_dir=previous, overrides=plan.overrides,
                                          trainjob=p.nodes > 1, retries=p.retries,
                                          retry_backoff_s=p.retry_backoff_s,
                                          run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)  # keys the task's verdict
            place(task, podspec.pod(plan.task_placement(stage)), display_name=stage)
            retry_lost_pods(task, p.retries, p.retry_backoff_s)
            previous = task.output
        return previous

    return curriculum


def compile_to(plan: Plan, output) -> Path:
    """Write the compiled pipeline (IR YAML with its Kubernetes platform spec) to ``output``."""
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build(plan), package_path=str(out))
    return out

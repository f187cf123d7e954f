"""Both DAGs from one factory: plan -> one task per stage slot -> kubeflow, in one chain, and promote after all.

Every task after ``plan`` uses the trigger rule ``none_failed``: a skipped task (a stage not in this run, the
``kubeflow`` task outside ``executor=kfp``) lets the chain go on, a failed one stops it, and everything after a
failure is ``upstream_failed``, ``promote`` included.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import TriggerRule, dag, task

from parathink_airflow import tasks
from parathink_airflow.chain import SLOTS
from parathink_airflow.compat import access_control
from parathink_airflow.params import config_root, form
from parathink_airflow.pools import task_pools

START = datetime(2026, 1, 1, tzinfo=UTC)
# Retries of exit code 1 follow the cluster profile (PlacementRetryPolicy); the ceiling is Airflow's.
STAGE_TASK = dict(trigger_rule=TriggerRule.NONE_FAILED, retries=tasks.MAX_RETRIES, retry_delay=timedelta(minutes=1),
                  retry_policy=tasks.PlacementRetryPolicy(), execution_timeout=timedelta(seconds=tasks.MAX_TIMEOUT_S))
NPR_SLOT = "rl_easy_before_teacher"
PLAN_TIMEOUT = timedelta(minutes=10)  # composing and validating takes seconds; a hung plan must not hold a worker


def curriculum_dag(dag_id: str, *, schedule, nightly: bool, doc_md: str, **dag_kwargs):
    """The curriculum DAG: ``nightly`` names run directories by date, derives the seed from it and promotes."""

    roles = access_control(os.environ)  # who may see and trigger it (compat.py); None: Airflow's defaults

    @dag(dag_id=dag_id, schedule=schedule, start_date=START, catchup=False, doc_md=doc_md,
         params=form(promote=nightly, nightly=nightly), tags=["parathink"],
         **({"access_control": roles} if roles else {}), **dag_kwargs)
    def curriculum():
        run = task(task_id="plan", retries=0, execution_timeout=PLAN_TIMEOUT)(tasks.plan)(dated_runs=nightly)
        stages = []
        pools = task_pools(SLOTS, config_root())  # GPU stages wait for a node of the GPU pool in Airflow (pools.py)
        for task_id, stage in SLOTS:
            label = f"{stage} (before teacher: NPR-Zero)" if task_id == NPR_SLOT else stage
            pool = {"pool": pools[task_id]} if task_id in pools else {}
            current = task(task_id=task_id, task_display_name=label, **STAGE_TASK, **pool)(tasks.stage)(
                run, slot=task_id)
            # Every earlier slot, not only the one before: plan skips the unused slots up front, and none_failed
            # on a skipped neighbour alone let eval start beside sft (seen on the real scheduler, tests/e2e).
            [run, *stages] >> current
            stages.append(current)
        # A sensor in reschedule mode: the pipeline may run for days without holding a worker; its wait is bounded
        # by the stages' ceiling end to end, each poke by a minute's work.
        kubeflow = task.sensor(task_id="kubeflow", trigger_rule=TriggerRule.NONE_FAILED, retries=0,
                               mode="reschedule", poke_interval=tasks.KFP_POKE_S,
                               timeout=tasks.MAX_TIMEOUT_S * len(SLOTS),
                               execution_timeout=timedelta(minutes=10))(tasks.kubeflow)(run)
        promote = task(task_id="promote", **STAGE_TASK)(tasks.promote)(run)
        [run, *stages] >> kubeflow
        # promote, the one leaf, waits on every stage: a failed one anywhere makes it upstream_failed, which
        # fails the DAG run even when the tasks after the failure were skipped up front by plan.
        [*stages, kubeflow] >> promote

    return curriculum()

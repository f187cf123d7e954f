"""The DAG's chain of stage tasks, fixed at parse time, and which task runs which stage of a run.

Airflow needs its tasks when it parses the file, but a run's stages are only known once ``parathink plan`` has
read the form and the experiment. The chain is the shortest sequence in which every experiment's stage list
appears in order: the curriculum's canonical order, plus a second ``rl_easy`` slot before ``teacher`` for NPR,
whose RL-from-the-instruct-model stage (NPR-Zero) produces the model its teacher samples from.

A run's stages are matched to slots from the right, so a stage takes its canonical slot unless its order
forces the earlier one; every slot without a stage is skipped, and the trigger rule ``none_failed`` lets
the chain go on past it.
"""

from __future__ import annotations

from collections.abc import Sequence

# (task id, stage): the task runs `parathink stage <stage>` when the run's stage list places it there.
SLOTS: tuple[tuple[str, str], ...] = (
    ("base", "base"),
    ("rl_easy_before_teacher", "rl_easy"),
    ("teacher", "teacher"),
    ("filter", "filter"),
    ("sft", "sft"),
    ("rl_easy", "rl_easy"),
    ("rl_hard", "rl_hard"),
    ("rl_scaffold", "rl_scaffold"),
    ("grpo_baseline", "grpo_baseline"),
    ("eval", "eval"),
)
# The curriculum in its canonical order (hydra_conf/config.yaml's `stages`): what the form offers.
CANONICAL: tuple[str, ...] = tuple(stage for task_id, stage in SLOTS if task_id == stage)


class ChainError(ValueError):
    """A stage list that the chain cannot run in its order."""


def assign(stages: Sequence[str]) -> dict[str, str]:
    """{task id: stage} for a run's ``stages`` in order; raises ChainError naming what does not fit."""
    unknown = [s for s in stages if s not in CANONICAL]
    if unknown:
        raise ChainError(f"stages: {unknown[0]!r} has no task in this DAG (its stages: {', '.join(CANONICAL)})")
    out: dict[str, str] = {}
    i = len(SLOTS)
    for stage in reversed(stages):
        i -= 1
        while i >= 0 and SLOTS[i][1] != stage:
            i -= 1
        if i < 0:
            order = " -> ".join(task_id for task_id, _ in SLOTS)
            raise ChainError(f"stages: [{', '.join(stages)}] cannot run in this order on the DAG's chain "
                             f"({order}); run them as two DAG runs on the same run_dir")
        out[SLOTS[i][0]] = stage
    return out

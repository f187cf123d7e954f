"""parathink_curriculum: the Parallel-R1 curriculum from Airflow's trigger form.

Fill in the form (experiment, stages, run directory, seed, overrides, executor, promote) and press Trigger. The
first task, ``plan``, validates the whole config with ``parathink plan`` in seconds; then each stage is one
``parathink stage NAME`` call, in the curriculum's order; ``promote`` moves the registry's champion when asked to
and when this run's model wins. See docs/airflow.md.
"""

from parathink_airflow.factory import curriculum_dag

curriculum_dag(
    "parathink_curriculum",
    schedule=None,
    nightly=False,
    doc_md=__doc__,
    dag_display_name="parathink: curriculum",
    description="Train a model to think in parallel: teacher -> filter -> cold-start SFT -> RL -> eval",
    is_paused_upon_creation=False,  # triggered by hand only; nothing runs until someone presses Trigger
)

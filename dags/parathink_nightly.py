"""parathink_nightly: the curriculum every night on fresh problems, evaluated, and promoted when it wins.

Scheduled with ``CronTriggerTimetable`` (02:00 UTC; ``PARATHINK_NIGHTLY_CRON`` and ``PARATHINK_NIGHTLY_TZ`` change
it), one run at a time, no catch-up. Each night gets its own run directory (its date) and, unless the form sets
one, a seed from its date, so the experiment's sources draw new problems. The last task compares the night's eval
with the registry's champion and moves the alias only when the candidate wins. See docs/airflow.md.
"""

import os

from airflow.sdk import CronTriggerTimetable

from parathink_airflow.factory import curriculum_dag

curriculum_dag(
    "parathink_nightly",
    schedule=CronTriggerTimetable(os.environ.get("PARATHINK_NIGHTLY_CRON", "0 2 * * *"),
                                  timezone=os.environ.get("PARATHINK_NIGHTLY_TZ", "UTC")),
    nightly=True,
    doc_md=__doc__,
    dag_display_name="parathink: nightly retraining",
    description="The curriculum every night on fresh problems; promotes the model when it beats the champion",
    max_active_runs=1,
    is_paused_upon_creation=True,  # a full curriculum every night: switched on deliberately, in the UI
)

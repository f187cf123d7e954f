"""What the DAGs need of the Airflow that parses them, and who may run them; pure (no Airflow import), so the main
test venv checks it.

- Airflow >= 3.3: the stage tasks' ``retry_policy`` (exit 1 retried per the cluster profile, 2 and 3 never) came in
  3.3; an older Airflow fails the parse with one line instead of an ImportError deep in the SDK;
- ``PARATHINK_DAG_ROLES``: the roles (comma-separated) that may see and trigger the DAGs, as their
  ``access_control``; unset, Airflow's own defaults apply (with FAB's auth manager: Admin and Op). A run starts
  8-GPU pods: a shared Airflow should name the roles that may.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MIN_AIRFLOW = (3, 3)
ROLES_ENV = "PARATHINK_DAG_ROLES"


def require_airflow(version: str) -> None:
    found = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if found < MIN_AIRFLOW:
        raise ImportError(f"parathink's DAGs need Airflow >= {'.'.join(map(str, MIN_AIRFLOW))} (the stage tasks' "
                          f"retry_policy); this is Airflow {version}")


def access_control(env: Mapping[str, str]) -> dict[str, dict[str, set[str]]] | None:
    """``{role: {"DAGs": {can_read, can_edit}, "DAG Runs": {can_read, can_create}}}`` for the roles the deployment
    names, None when it names none."""
    roles = [r.strip() for r in env.get(ROLES_ENV, "").split(",") if r.strip()]
    if not roles:
        return None
    return {r: {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}} for r in roles}

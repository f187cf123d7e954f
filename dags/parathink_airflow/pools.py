"""Which stage tasks wait in the Airflow pool of GPU tasks, fixed at parse time from the deployment's profile.

A GPU stage's pod takes a whole node of the GPU pool. Without a bound in Airflow, two DAG runs (or a nightly and a
hand-triggered one) start more GPU pods than the pool has nodes: the extra pods sit Pending until their start-up
timeout fails them, each failure spends a retry, and the node autoscaler is asked for nodes the quota may not
allow. An Airflow pool of as many slots as the GPU pool has nodes makes the extra tasks wait in Airflow instead,
where the UI shows them queued. CPU stages (``filter``, ``promote``) stay in Airflow's default pool.

Settings, from the deployment (helm/airflow-values.yaml ``env``; ``make airflow`` takes them from its environment):

- ``PARATHINK_CLUSTER``: the profile (``hydra_conf/cluster/NAME.yaml``) whose ``gpu_stages`` go to the pool;
  unset: the config's default profile (``local``), which has none, so nothing waits in a pool;
- ``PARATHINK_GPU_STAGES``: the stages that wait in the pool, comma-separated, for a DAG folder without
  ``hydra_conf`` beside it (an existing Airflow given only ``dags/``); without it such a folder takes the packaged
  ``gpu`` profile's list (``PACKAGED_GPU_STAGES``, kept equal to hydra_conf/cluster/gpu.yaml by a test) and any
  other profile fails the parse with one line;
- ``PARATHINK_GPU_POOL``: the pool's name (default ``parathink_gpu``); empty: no pool;
- ``PARATHINK_GPU_POOL_SLOTS``: its size, the GPU pool's node count (default 1). The pool is created by whoever
  starts Airflow (``tools/local_airflow.py``; the chart's migration job, helm/airflow-values.yaml), since a task of a
  pool that does not exist is never scheduled.

Pure: imports neither Airflow nor parathink (``yaml`` only), so the main test venv checks it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

POOL_ENV, SLOTS_ENV, CLUSTER_ENV = "PARATHINK_GPU_POOL", "PARATHINK_GPU_POOL_SLOTS", "PARATHINK_CLUSTER"
GPU_STAGES_ENV = "PARATHINK_GPU_STAGES"
PACKAGED_GPU_STAGES = ("base", "teacher", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline", "eval")
DEFAULT_POOL = "parathink_gpu"
DEFAULT_PROFILE = "local"  # hydra_conf/config.yaml's `cluster` default


def pool_name(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get(POOL_ENV, DEFAULT_POOL) or None


def pool_slots(env: Mapping[str, str] = os.environ) -> int:
    raw = env.get(SLOTS_ENV) or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{SLOTS_ENV}={raw!r}: the GPU pool's node count, an integer >= 1")
    return int(raw)


def gpu_stages(config_root: Path, env: Mapping[str, str] = os.environ) -> set[str]:
    """The deployment profile's ``gpu_stages`` (``PARATHINK_GPU_STAGES`` first); a profile that is not there fails
    the DAG's parse with one line."""
    if env.get(GPU_STAGES_ENV, "").strip():
        return {s.strip() for s in env[GPU_STAGES_ENV].split(",") if s.strip()}
    name = env.get(CLUSTER_ENV) or DEFAULT_PROFILE
    path = config_root / "cluster" / f"{name}.yaml"
    if not path.is_file():
        if not env.get(CLUSTER_ENV):  # no config folder beside the DAGs: `parathink plan` places the stages
            return set()
        if name == "gpu" and not config_root.is_dir():  # only dags/ was deployed: the packaged profile's list
            return set(PACKAGED_GPU_STAGES)
        raise ValueError(f"{CLUSTER_ENV}={name!r}: no cluster profile {path}; set {GPU_STAGES_ENV}=STAGE,... "
                         f"(the stages that wait in the GPU pool)")
    return set((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("gpu_stages") or ())


def task_pools(slots: Iterable[tuple[str, str]], config_root: Path,
               env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """{task id: pool} for the stage slots whose stage the deployment's profile places on GPUs."""
    pool = pool_name(env)
    if pool is None:
        return {}
    gpu = gpu_stages(config_root, env)
    return {task_id: pool for task_id, stage in slots if stage in gpu}

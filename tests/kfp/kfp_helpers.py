"""Helpers for the Kubeflow Pipelines tests: the cheap stages, the parathink command, the compiled YAML.

(A module of its own, not conftest.py: several test folders have a conftest.py, and importing one by name
would pick whichever came first.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# teacher + filter in seconds (tests/stages/test_teacher.py, test_filter.py): 40 + 40 problems, no MLflow.
CHEAP = ["experiment=tiny", "stages=[teacher,filter]", "teacher.self.model=builtin:tiny_base",
         "data.cold_start.0.n=40", "data.cold_start.1.n=40", "tracking=none"]
SEEN = ["experiment=parallel_r1_seen"]
SFT_2_NODES = [*SEEN, "+cluster.stage_overrides.sft.nodes=2"]


def parathink(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The ``parathink`` command in a fresh process (as a user or an orchestrator runs it)."""
    env = {**os.environ, "CI": "true", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "parathink.cli", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def plan_json(*overrides: str) -> dict:
    """What ``parathink plan`` prints: the placement every assertion compares the compiled pipeline with."""
    from parathink.pipeline.compose import compose
    from parathink.pipeline.runner import plan_document

    cfg = compose(list(overrides))
    return json.loads(json.dumps(plan_document(cfg, [str(s) for s in cfg.stages])))


class Compiled:
    """A compiled pipeline: its IR (tasks, executors) and its Kubernetes platform spec."""

    def __init__(self, path: Path):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        self.spec = docs[0]
        self.platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] if len(docs) > 1 else {}
        self.tasks = self.spec["root"]["dag"]["tasks"]

    def order(self) -> list[str]:
        """Task names from the first to the last, following the run_dir hand-over."""
        first = [n for n, t in self.tasks.items() if not t.get("dependentTasks")]
        assert len(first) == 1, f"one first task expected, got {first}"
        order = first
        while True:
            nxt = [n for n, t in self.tasks.items() if t.get("dependentTasks") == [order[-1]]]
            if not nxt:
                return order
            assert len(nxt) == 1, f"a chain expected after {order[-1]}, got {nxt}"
            order += nxt

    def param(self, task: str, name: str):
        value = self.tasks[task]["inputs"]["parameters"][name]
        return value["runtimeValue"]["constant"] if "runtimeValue" in value else value

    def container(self, task: str) -> dict:
        executor = self.tasks[task]["componentRef"]["name"].replace("comp-", "exec-", 1)
        return self.spec["deploymentSpec"]["executors"][executor]["container"]

    def kubernetes(self, task: str) -> dict:
        return self.platform.get(self.tasks[task]["componentRef"]["name"].replace("comp-", "exec-", 1), {})


def task_name(stage: str) -> str:
    return stage.replace("_", "-")  # KFP's names for rl_easy & co.

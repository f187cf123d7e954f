"""One process per GPU on a node: a stage placed on 2 GPUs, as its Kubeflow stage pod, on the real control plane
(conftest.py). The real scheduler binds it to the node that advertises 2 fake GPUs (kube_cluster.TWO_GPU_NODE:
``nvidia.com/gpu: 2`` in its status); that node's fake kubelet runs the pod's ``parathink stage par ...`` on this
machine, which starts the placement's launch (parathink.launch): 2 ranks, on the CPU, that join one process group.
The stage (tests/stages/rank_stage_parallel.py, data-parallel) sums 1 + rank over that group: 13 says both joined."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kube_cluster import TWO_GPU_LABEL, TWO_GPU_NODE, TWO_GPU_TAINT
from parathink_chart import NAMESPACE
from test_control_plane import read_pod

from parathink.kfp.plan import stage_objects

STAGE = Path(__file__).resolve().parents[1] / "stages" / "rank_stage_parallel.py"

pytestmark = pytest.mark.slow
STAGE_WAIT_S = 600  # a bound on the wait (two ranks import torch on a busy machine), never a figure under test


def two_gpu_profile(runs_root: Path) -> list[str]:
    """The GPU profile on the 2-GPU node, sized for it; the run directory on this machine's disk (the fake kubelet
    runs pods here: an absolute path on no volume is kept as given, parathink.placement.cluster.pod_run_dir)."""
    selector = ", ".join(f"{k}: {v}" for k, v in TWO_GPU_LABEL.items())
    toleration = f"{{key: {TWO_GPU_TAINT['key']}, operator: Exists, effect: {TWO_GPU_TAINT['effect']}}}"
    return ["experiment=tiny", "cluster=gpu", "cluster.gpus_per_node=2", "cluster.scratch=null",
            f"cluster.node_pool={{node_selector: {{{selector}}}, tolerations: [{toleration}]}}",
            "cluster.resources.gpu={cpu: '2', memory: 8Gi}", "cluster.shm_size=1Gi", "cluster.gpu_stages=[par]",
            f"cluster.runs_root={runs_root}", f"run_dir={runs_root / 'run'}", "stages=[par]", "tracking=none"]


def test_a_stage_pod_on_a_two_gpu_node_runs_two_ranks_that_join(cluster, chart_installed, tmp_path):
    runs_root, calls = tmp_path / "runs", tmp_path / "calls.jsonl"
    overrides = [*two_gpu_profile(runs_root), f"+stage_modules.par={STAGE}", f"+par.calls={calls}",
                 "+par.collective=true"]
    (pod,) = stage_objects(overrides, "par")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    pod["metadata"]["name"] = "ranks-par"
    cluster.core.create_namespaced_pod(NAMESPACE, pod)
    deadline = time.monotonic() + STAGE_WAIT_S
    while (done := read_pod(cluster, "ranks-par")).status.phase not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"the 2-GPU stage pod not finished in {STAGE_WAIT_S} s: {done.status}"
        time.sleep(1)
    log = cluster.core.read_namespaced_pod_log("ranks-par", NAMESPACE)
    assert done.status.phase == "Succeeded", log[-3000:]
    assert done.spec.node_name == TWO_GPU_NODE
    print("\n".join(line for line in log.splitlines() if "ranks" in line or "running on" in line))
    assert "stage par: starting 2 ranks: torchrun --nproc_per_node 2 -m parathink.cli stage par" in log
    assert "par: running on 2 processes" in log
    assert sorted(json.loads(line)["rank"] for line in calls.read_text().splitlines()) == [0, 1]
    assert (runs_root / "run" / "par" / "value.txt").read_text() == "13"  # 10 + (0 + 1) + (1 + 1)

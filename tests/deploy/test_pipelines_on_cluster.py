"""One curriculum task through each orchestrator's own pod, on the real control plane (conftest.py): Airflow's
KubernetesPodOperator (the DAG's `executor=kubernetes` task, acting as Airflow's worker service account with
only the chart's RBAC) and the Kubeflow pipeline's stage pod. The real scheduler places each pod; the CPU node's
fake kubelet runs its `parathink stage filter` for real, so the pod's exit code, log and outputs are the stage's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kube_cluster import CPU_NODE, ORCHESTRATOR_NS
from parathink_chart import NAMESPACE
from test_control_plane import read_pod, wait_for

from parathink.kfp.plan import stage_objects

ROOT = Path(__file__).resolve().parents[2]
PARATHINK = Path(sys.executable).with_name("parathink")
AIRFLOW_PY = ROOT / ".venv-airflow" / "bin" / "python"
PODS = ROOT / "tools" / "stage_pod.py"
# The tiny curriculum's cheap settings, on the GPU cluster profile (filter is a CPU stage there).
TINY = ["teacher.self.model=builtin:tiny_base", "data.cold_start.0.n=40", "data.cold_start.1.n=40", "tracking=none"]
PLAN = ["experiment=tiny", "cluster=gpu", "seed=0", "stages=[teacher,filter]", *TINY]
ENV = {**os.environ, "CI": "true", "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def teacher_output(tmp_path_factory) -> Path:
    """A run directory whose teacher stage is done (filter's input), made once by the project's parathink."""
    run_dir = tmp_path_factory.mktemp("teacher") / "run"
    proc = subprocess.run([PARATHINK, "stage", "teacher", f"run_dir={run_dir}", *PLAN], capture_output=True,
                          text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def fresh_run_dir(teacher_output: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(teacher_output, tmp_path / "run"))


def airflow_pods(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    if not AIRFLOW_PY.exists():
        pytest.fail("no Airflow venv: run `make airflow-venv`")
    env = {k: v for k, v in ENV.items() if not k.startswith("AIRFLOW")}
    return subprocess.run([AIRFLOW_PY, PODS, *args], capture_output=True, text=True, env=env, timeout=timeout)


def plan_file(run_dir: Path, tmp_path: Path) -> Path:
    proc = subprocess.run([PARATHINK, "plan", f"run_dir={run_dir}", *PLAN], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "plan.json"
    path.write_text(proc.stdout)
    return path


def test_airflow_kubernetes_pod_operator_runs_filter(cluster, chart_installed, teacher_output, tmp_path):
    run_dir = fresh_run_dir(teacher_output, tmp_path)
    kubeconfig = cluster.plane.service_account_kubeconfig(ORCHESTRATOR_NS, "airflow-worker")
    proc = airflow_pods("run", "--plan", str(plan_file(run_dir, tmp_path)), "--stage", "filter",
                        "--kubeconfig", str(kubeconfig), "--", *TINY)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "filter: done" in out  # the stage's own log, fetched through the API server from the kubelet
    assert (run_dir / "filter" / "_manifest.json").exists() and (run_dir / "filter" / "accepted.jsonl").exists()
    # on_finish_action=delete_succeeded_pod: the pod is gone once the task succeeded
    pods = cluster.core.list_namespaced_pod(NAMESPACE, label_selector="parathink.io/stage=filter").items
    assert not [p for p in pods if p.status.phase == "Succeeded" and not p.metadata.deletion_timestamp]


def test_airflow_task_gets_the_stage_exit_code(cluster, chart_installed, teacher_output, tmp_path):
    """A bad override: the stage exits 2 in its pod, and the operator hands 2 back (Airflow does not retry it)."""
    run_dir = fresh_run_dir(teacher_output, tmp_path)
    kubeconfig = cluster.plane.service_account_kubeconfig(ORCHESTRATOR_NS, "airflow-worker")
    proc = airflow_pods("run", "--plan", str(plan_file(run_dir, tmp_path)), "--stage", "filter",
                        "--kubeconfig", str(kubeconfig), "--no-logs", "--", *TINY, "filter.no_such_key=1")
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-5000:]


def test_kubeflow_stage_pod_runs_filter(cluster, chart_installed, teacher_output, tmp_path):
    runs_root = tmp_path / "runs"
    shutil.copytree(teacher_output, runs_root / "kfp")
    # An absolute path on no volume is no run directory pods share (parathink.placement.cluster.pod_run_dir): KFP keeps it as
    # given, which is what this test's fake kubelet, running pods on this machine's disk, needs.
    (pod,) = stage_objects([*PLAN, f"cluster.runs_root={runs_root}", f"run_dir={runs_root / 'kfp'}"], "filter")
    pod["metadata"]["name"] = "kfp-filter"
    cluster.core.create_namespaced_pod(NAMESPACE, pod)
    done = wait_for(lambda: read_pod(cluster, "kfp-filter"), lambda p: p.status.phase in ("Succeeded", "Failed"),
                    "KFP filter pod finished")
    log = cluster.core.read_namespaced_pod_log("kfp-filter", NAMESPACE)
    assert done.status.phase == "Succeeded", log[-3000:]
    assert done.spec.node_name == CPU_NODE and "filter: done" in log
    assert (runs_root / "kfp" / "filter" / "_manifest.json").exists()


def test_a_stage_pod_that_never_starts_is_deleted_with_its_task(cluster, chart_installed, tmp_path):
    """The operator gives up after startup_timeout_s (no node has 9 GPUs: Pending on the real scheduler); the task
    fails and its pod goes with it, instead of waiting for GPUs beside the retry's pod (the on_kill path)."""
    proc = subprocess.run([PARATHINK, "plan", "run_dir=s3://parathink/runs/pending", *PLAN, "cluster.gpus_per_node=9",
                           "cluster.startup_timeout_s=5"], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plan = tmp_path / "plan.json"
    plan.write_text(proc.stdout)
    kubeconfig = cluster.plane.service_account_kubeconfig(ORCHESTRATOR_NS, "airflow-worker")
    ran = airflow_pods("run", "--plan", str(plan), "--stage", "teacher", "--kubeconfig", str(kubeconfig), "--no-logs")
    assert ran.returncode != 0
    pods = cluster.core.list_namespaced_pod(NAMESPACE, label_selector="parathink.io/stage=teacher").items
    assert [p.metadata.name for p in pods if not p.metadata.deletion_timestamp] == []

"""The DAG's pod operator from the command line (`tools/stage_pod.py run`) on the real local cluster: `parathink plan` renders the
run's pods (cluster=gpu pointed at this cluster, test_stage_pods.profile), and the DAG's own KubernetesPodOperator
(dags/parathink_airflow/pods.py, Airflow and its cncf-kubernetes provider from .venv-airflow) creates the stage's
pod, follows its log and hands back the stage's exit code: the gate table reaches the operator's log, a passed
stage's pod is deleted, a stage that fails its gate exits 3. The DAG run itself through Airflow (stages passing
their run directory on S3, retries, a cancelled task, the pool) is test_dag_on_cluster.py."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from built_images import ROOT
from kubernetes import client
from local_install import NAMESPACE, S3_BUCKET
from test_stage_pods import profile

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
AIRFLOW_PY = ROOT / ".venv-airflow" / "bin" / "python"


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> str:
    run_dir = f"s3://{S3_BUCKET}/runs/dag-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run([ROOT / ".venv" / "bin" / "parathink", "plan", "experiment=tiny", *profile(),
                           f"run_dir={run_dir}", "stages=[base,teacher,filter]", "tracking=server"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(proc.stdout)
    assert json.loads(proc.stdout)["pods"]["base"]["spec"]["containers"][0]["image"].endswith("trainer-cpu:0.1.0")
    return str(path)


def run_stage(plan: str, kubeconfig, stage: str, *overrides: str) -> subprocess.CompletedProcess:
    if not AIRFLOW_PY.exists():
        pytest.fail("no Airflow venv: run `make airflow-venv`")
    return subprocess.run([AIRFLOW_PY, ROOT / "tools" / "stage_pod.py", "run", "--plan", plan,
                           "--stage", stage, "--kubeconfig", str(kubeconfig), "--", *overrides],
                          capture_output=True, text=True, timeout=600)


def stage_pods(api, stage: str) -> list:
    return client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=f"parathink.io/stage={stage}").items


def test_operator_runs_the_stage_pod_and_deletes_it_after_success(plan, kubeconfig, api):
    before = {p.metadata.name for p in stage_pods(api, "base")}
    proc = run_stage(plan, kubeconfig, "base")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "base gate: passed" in log and "probe_accuracy" in log  # the gate table, in the operator's log
    assert {p.metadata.name for p in stage_pods(api, "base")} <= before  # on_finish_action=delete_succeeded_pod


def test_a_stage_that_fails_its_gate_exits_3(plan, kubeconfig, api):
    before = {p.metadata.name for p in stage_pods(api, "base")}
    proc = run_stage(plan, kubeconfig, "base", "base.gate.min_accuracy=0.99")
    log = proc.stdout + proc.stderr
    try:
        assert proc.returncode == 3, log[-3000:]
        assert "base gate: FAILED" in log and "quality gate failed" in log, log[-3000:]
    finally:  # a failed stage's pod is kept for `kubectl logs`; the test removes its own
        for pod in stage_pods(api, "base"):
            if pod.metadata.name not in before:
                client.CoreV1Api(api).delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)

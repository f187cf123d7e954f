"""The DAG's plan pod (an Airflow worker without parathink plans in a pod of the trainer image: dags/parathink_airflow/
pods.py ``plan_in_pod``) on the real control plane (conftest.py), created by the DAG's own operator acting as
Airflow's worker service account with only the chart's RBAC (``tools/stage_pod.py plan``), placed by the real
scheduler. Stand-in: the CPU node's fake kubelet (fake_kubelet.py) runs the pod's ``parathink plan ...`` as a process
of this machine with the pod's environment, its output as the pod's log, which the operator reads back through the
API server. So what is checked is the path of the document and of a refusal: pod spec accepted by the API server,
scheduled, log read back, parsed, the pod deleted; not the image (tests/e2e runs images)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kube_cluster import ORCHESTRATOR_NS
from parathink_chart import NAMESPACE

ROOT = Path(__file__).resolve().parents[2]
PARATHINK = Path(sys.executable).with_name("parathink")
AIRFLOW_PY = ROOT / ".venv-airflow" / "bin" / "python"
PODS = ROOT / "tools" / "stage_pod.py"
# What the DAG's plan task passes (form.arguments), the trainer image and namespace from the deployment's environment.
PLAN = ["experiment=tiny", "cluster=gpu", "run_dir=s3://parathink/runs/plan-pod", "seed=0", "stages=[teacher,filter]",
        "--form", "tracking=none"]
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}, "CI": "true",
       "PARATHINK_IMAGE": "parathink-trainer:plan-pod-test", "PARATHINK_NAMESPACE": NAMESPACE}

pytestmark = pytest.mark.slow


def plan_in_pod(cluster, *args: str) -> subprocess.CompletedProcess:
    if not AIRFLOW_PY.exists():
        pytest.fail("no Airflow venv: run `make airflow-venv`")
    kubeconfig = cluster.plane.service_account_kubeconfig(ORCHESTRATOR_NS, "airflow-worker")
    return subprocess.run([AIRFLOW_PY, PODS, "plan", "--kubeconfig", str(kubeconfig), "--", *args],
                          capture_output=True, text=True, env=ENV, timeout=600)


def on_the_worker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PARATHINK, "plan", *args], capture_output=True, text=True, env=ENV, timeout=300)


def plan_pods(cluster) -> list:
    pods = cluster.core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/component=plan").items
    return [p for p in pods if not p.metadata.deletion_timestamp]


def test_the_plan_pod_gives_the_workers_plan_document(cluster, chart_installed):
    ran, here = plan_in_pod(cluster, *PLAN), on_the_worker(*PLAN)
    assert ran.returncode == 0, ran.stderr[-400:]
    assert here.returncode == 0, here.stderr[-3000:]
    assert json.loads(ran.stdout) == json.loads(here.stdout)
    assert plan_pods(cluster) == []  # deleted once read


def test_a_refused_form_in_the_plan_pod_is_the_workers_one_line_and_exit_2(cluster, chart_installed):
    bad = [*PLAN, "filter.no_such_key=1"]
    ran, here = plan_in_pod(cluster, *bad), on_the_worker(*bad)
    assert ran.returncode == here.returncode == 2, ran.stderr[-5000:]
    line = [x for x in here.stderr.splitlines() if x.startswith("parathink:")][-1]
    assert ran.stderr.splitlines()[-1] == line and "no_such_key" in line
    assert plan_pods(cluster) == []  # a refused form leaves no pod behind either

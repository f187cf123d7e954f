"""The plan where the Airflow worker has no ``parathink`` (a platform team's Airflow with only ``dags/``): it runs in a
pod of the trainer image (dags/parathink_airflow/pods.py ``plan_in_pod``), decided by local.plan_in.

The first tests are pure (the decision, the pod's template, reading its log). The last ones run the plan task's
``_plan`` in the Airflow venv (in_airflow.py ``plan``), where the plan pod is run by a STAND-IN kubelet (no cluster:
the pod's ``parathink`` command runs as a process of this machine with only the pod's environment, its output as the
pod's log); tests/deploy/test_plan_pod_on_cluster.py runs it through a real API server and scheduler.
"""

from __future__ import annotations

import json
import re
import stat

import kubernetes_validate
import pytest
import yaml
from dag_helpers import PARATHINK, ROOT, airflow_env, in_airflow
from parathink_airflow import local, pods
from pod_security import violations

from parathink import form_policy
from parathink.config import deployment

DEPLOYMENT = {"PARATHINK_IMAGE": "registry.example/parathink/trainer@sha256:" + "a" * 64,
              "PARATHINK_NAMESPACE": "ml-runs", "PARATHINK_SERVICE_ACCOUNT": "runner-x",
              "PARATHINK_RUNS_ROOT": "s3://parathink/runs", "PARATHINK_DATA_ROOTS": "s3://parathink/data",
              # the form's allowlist widened for the built-in tiny model: the plan reads it where it runs
              "PARATHINK_FORM_ALLOW": "teacher.self.model"}


# ---------------------------------------------------------------- where the plan runs

def test_auto_plans_on_the_worker_only_when_it_has_parathink(tmp_path):
    fake = tmp_path / "bin" / "parathink"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert local.plan_in({"PATH": str(tmp_path / "nowhere")}) == "pod"
    assert local.plan_in({"PATH": str(fake.parent)}) == "worker"
    assert local.plan_in({"PATH": "", "PARATHINK_BIN": str(fake)}) == "worker"
    assert local.plan_in({"PATH": str(fake.parent), "PARATHINK_PLAN_IN": "auto"}) == "worker"


def test_an_explicit_setting_forces_either_way_and_a_bad_one_is_one_line():
    assert local.plan_in({"PATH": "", "PARATHINK_PLAN_IN": "worker"}) == "worker"  # then CommandMissing, as before
    assert local.plan_in({"PARATHINK_BIN": str(PARATHINK), "PARATHINK_PLAN_IN": "pod"}) == "pod"
    with pytest.raises(local.SettingError) as err:
        local.plan_in({"PARATHINK_PLAN_IN": "cluster"})
    assert str(err.value) == "PARATHINK_PLAN_IN: 'cluster' is not one of auto, worker, pod"


# ---------------------------------------------------------------- the pod

def test_the_plan_pod_is_the_deployments_image_namespace_and_account_without_a_token_as_uid_1000():
    pod = pods.plan_pod_template({**DEPLOYMENT, "PARATHINK_BIN": "/opt/x", "PARATHINK_WORKDIR": "/w",
                                  "AIRFLOW__CORE__FERNET_KEY": "secret", "PARATHINK_FORM_ALLOW": "seed"})
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    assert violations(pod["spec"]) == []  # Pod Security "restricted"
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert pod["metadata"]["namespace"] == "ml-runs" and spec["serviceAccountName"] == "runner-x"
    assert container["image"] == DEPLOYMENT["PARATHINK_IMAGE"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 1000
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["restartPolicy"] == "Never"
    assert 0 < spec["activeDeadlineSeconds"] < 600  # ends before the plan task's execution_timeout (10 minutes)
    assert container["resources"]["requests"] == {"cpu": "250m", "memory": "256Mi"}
    assert "command" not in container and "args" not in container  # the operator adds `parathink plan ...`
    env = {e["name"]: e["value"] for e in container["env"]}
    # what the plan reads from its environment, nothing of the worker's own (paths, Airflow's secrets)
    assert env == {**DEPLOYMENT, "PARATHINK_FORM_ALLOW": "seed"}
    assert "parathink.io/stage" not in pod["metadata"]["labels"]  # no stage's NetworkPolicy applies to it


def test_without_the_deployment_namespace_and_account_it_takes_the_packaged_profiles():
    pod = pods.plan_pod_template({"PARATHINK_IMAGE": "trainer:1", "PARATHINK_PLAN_IMAGE": "trainer-cpu:1"})
    assert pod["spec"]["containers"][0]["image"] == "trainer-cpu:1"  # a smaller image for the plan alone
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    for name in ("gpu", "local"):
        profile = yaml.safe_load((ROOT / "hydra_conf" / "cluster" / f"{name}.yaml").read_text())
        assert pod["metadata"]["namespace"] == profile["namespace"] == pods.DEFAULT_NAMESPACE
        assert pod["spec"]["serviceAccountName"] == profile["service_account"] == pods.DEFAULT_SERVICE_ACCOUNT
    for image in ("trainer", "trainer-cpu"):  # the uid the pod runs as is the images' own
        assert re.search(rf"^USER {pods.PLAN_UID}:{pods.PLAN_UID}$",
                         (ROOT / "images" / image / "Dockerfile").read_text(), re.M)
    with pytest.raises(local.SettingError, match="set PARATHINK_IMAGE"):
        pods.plan_pod_template({"PARATHINK_NAMESPACE": "x"})


def test_the_pod_gets_every_variable_the_plan_reads():
    read = {s.env for s in deployment.SETTINGS} | {form_policy.WIDEN_ENV, form_policy.DATA_ROOTS_ENV}
    assert read <= set(pods.PLAN_ENV)


# ---------------------------------------------------------------- its log

def test_the_document_is_read_from_the_log_whatever_stderr_adds_around_it():
    doc = {"stages": ["teacher"], "placement": {"teacher": {"nodes": 1}}, "pods": {"teacher": {"a": [{"b": 1}]}}}
    text = json.dumps(doc, indent=1)
    assert pods.plan_document(0, text + "\n") == doc
    assert pods.plan_document(0, "UserWarning: something\n{ not json\n" + text + "\nparathink: a late line\n") == doc
    with pytest.raises(local.PlanRefused, match="exited 0 but its log holds no plan document"):
        pods.plan_document(0, "starting\n")


def test_a_failed_plan_pod_is_the_same_one_line_as_the_workers_plan():
    log = "Traceback ...\nparathink: error: filter.no_such_key: not a key of the config\nsome last line\n"
    with pytest.raises(local.PlanRefused) as in_pod:
        pods.plan_document(2, log)
    assert in_pod.value.code == 2 and str(in_pod.value) == str(local.refused(2, log))
    assert str(in_pod.value) == "parathink: error: filter.no_such_key: not a key of the config"


# ---------------------------------------------------------------- the plan task, its pod run by a stand-in

TINY = {"experiment": "tiny", "stages": ["teacher", "filter"], "run_dir": "s3://parathink/runs/t",
        "executor": "kubernetes", "overrides": ["teacher.self.model=builtin:tiny_base", "tracking=none"]}


@pytest.fixture(scope="module")
def planned(airflow_python, tmp_path_factory):
    home = tmp_path_factory.mktemp("plan-pod")
    cases = {
        "worker": {"params": TINY, "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "worker"}},
        "pod": {"params": TINY, "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "pod"}},
        # auto: no PARATHINK_BIN and no parathink on PATH, as on an Airflow with only dags/
        "auto": {"params": TINY, "env": {**DEPLOYMENT, "PATH": "/usr/bin:/bin"}, "unset": ["PARATHINK_BIN"]},
        "bad_form_worker": {"params": {**TINY, "overrides": ["filter.no_such_key=1"]},
                            "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "worker"}},
        "bad_form_pod": {"params": {**TINY, "overrides": ["filter.no_such_key=1"]},
                         "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "pod"}},
        "local_executor": {"params": {**TINY, "executor": "local"}, "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "pod"}},
        "bad_setting": {"params": TINY, "env": {**DEPLOYMENT, "PARATHINK_PLAN_IN": "sometimes"}},
        "no_image": {"params": TINY, "env": {"PARATHINK_PLAN_IN": "pod"}, "unset": ["PARATHINK_IMAGE"]},
    }
    path = home / "cases.json"
    path.write_text(json.dumps(list(cases.values())))
    got, _ = in_airflow(airflow_env(home, home), "plan", str(path), timeout=600)
    return dict(zip(cases, got))


def test_the_pod_gets_the_workers_arguments_and_the_task_the_same_plan(planned):
    """STAND-IN kubelet (in_airflow.py plan): the plan pod's command runs here with the pod's environment only."""
    worker, pod = planned["worker"], planned["pod"]
    assert "error" not in worker and "error" not in pod, (worker.get("error"), pod.get("error"))
    assert pod["plan"] == worker["plan"]  # what every later task reads
    assert worker["pod_requests"] == [] and pod["worker_calls"] == []
    (call,) = worker["worker_calls"]
    (request,) = pod["pod_requests"]
    (container,) = request["spec"]["containers"]
    assert container["command"] == ["parathink"] and container["args"] == ["plan", *call]
    assert "--form" in call and call[-2:] == TINY["overrides"]  # the form's overrides held to the allowlist there too
    assert request["metadata"]["namespace"] == "ml-runs" and request["spec"]["serviceAccountName"] == "runner-x"
    assert request["spec"]["automountServiceAccountToken"] is False
    assert request["spec"]["securityContext"]["runAsUser"] == 1000
    assert container["image"] == DEPLOYMENT["PARATHINK_IMAGE"]
    assert pod["on_kill"]  # a stopped plan task deletes its pod


def test_auto_plans_in_a_pod_where_the_worker_has_no_parathink(planned):
    """STAND-IN kubelet, as above."""
    assert planned["auto"]["worker_calls"] == [] and len(planned["auto"]["pod_requests"]) == 1
    assert planned["auto"]["plan"] == planned["worker"]["plan"]


def test_a_refused_form_fails_the_plan_with_the_workers_one_line(planned):
    """STAND-IN kubelet: `parathink plan` exits 2 in the "pod"; the task's error is the worker's, word for word."""
    worker, pod = planned["bad_form_worker"]["error"], planned["bad_form_pod"]["error"]
    assert worker.startswith("PlanRefused: parathink: error:") and "no_such_key" in worker
    assert pod == worker


def test_what_cannot_plan_in_a_pod_fails_in_one_line_before_any_pod(planned):
    assert planned["local_executor"]["error"] == (
        "FormError: executor=local: its tasks run parathink on this Airflow worker, but the plan runs in a pod "
        "(PARATHINK_PLAN_IN=pod); use executor=kubernetes")
    assert planned["bad_setting"]["error"] == (
        "SettingError: PARATHINK_PLAN_IN: 'sometimes' is not one of auto, worker, pod")
    assert planned["no_image"]["error"].startswith("SettingError: plan: it runs in a pod here")
    assert planned["no_image"]["error"].endswith("set PARATHINK_IMAGE (the trainer image) or PARATHINK_PLAN_IMAGE")
    for case in ("local_executor", "bad_setting", "no_image"):
        assert planned[case]["pod_requests"] == [] and planned[case]["worker_calls"] == []

"""The chart's pod policy (templates/pod-policy.yaml): a pod created in parathink's namespace may name only the
Secrets and the service account stage pods use. Every pod parathink itself makes passes it; a pod that names
MLflow's admin or database Secret, by any of the ways a pod can, does not.

Stand-in: this machine's API server is 1.20 and ValidatingAdmissionPolicy is 1.30's. The policy's own CEL
expressions are evaluated with cel-python, and :func:`admit` plays the API server's order (the match conditions,
then the variables in order, then every validation); what is not played: CEL's cost estimate (an API server refuses
a policy it estimates too costly), Kubernetes' CEL library extensions (the policy uses none) and the binding's
namespace selector (checked as text below)."""

from __future__ import annotations

import copy
import json
import sys

import celpy
import pytest
from parathink_chart import NAMESPACE, ROOT, hooks, render

from parathink import cli
from parathink.kfp.plan import make_plan, objects

WORKER = "system:serviceaccount:airflow:airflow-worker"  # the Airflow worker (KubernetesExecutor)
REPLICASET = "system:serviceaccount:kube-system:replicaset-controller"
ENV = celpy.Environment()


def policy(values: dict | None = None) -> dict:
    (vap,) = [o for o in render(values) if o["kind"] == "ValidatingAdmissionPolicy"]
    return vap


def evaluate(expression: str, activation: dict):
    return ENV.program(ENV.compile(expression)).evaluate(activation)


def admit(vap: dict, pod: dict, username: str = WORKER) -> list[str]:
    """The messages of the validations ``pod`` fails when ``username`` creates it; [] when it is admitted."""
    spec = vap["spec"]
    activation = {"object": celpy.json_to_cel(pod),
                  "request": celpy.json_to_cel({"userInfo": {"username": username}, "operation": "CREATE"})}
    if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return []  # not checked at all
    variables = {}
    for v in spec.get("variables", []):
        variables[v["name"]] = evaluate(v["expression"], {**activation, "variables": celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): x for k, x in variables.items()})})
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): x for k, x in variables.items()})
    return [v["message"] for v in spec["validations"] if not bool(evaluate(v["expression"], activation))]


def plan_pods(capsys, *overrides: str) -> dict[str, dict]:
    assert cli.main(["plan", "experiment=parallel_r1_seen", *overrides]) == 0
    return json.loads(capsys.readouterr().out)["pods"]


def test_every_pod_parathink_makes_is_admitted(capsys):
    """The stage pods `plan` renders (each stage of the curriculum, promote with its own MLflow user), the KFP tasks
    of a multi-node stage (launcher and the TrainJob's pod template) and the chart's own `helm test` pod."""
    vap = policy()
    pods = plan_pods(capsys, "stages=[base,teacher,filter,sft,rl_easy,rl_hard,eval,promote]")
    assert len(pods) == 8
    for name, pod in pods.items():
        assert admit(vap, pod) == [], name
    plan_ = make_plan(["experiment=parallel_r1_seen", "+cluster.stage_overrides.sft.nodes=2"])
    launcher, trainjob = objects(plan_, "sft")[:2]
    assert admit(vap, launcher) == []
    # The TrainJob's node pods, as its controller makes them: the runtime patch's pod spec, the trainer's env in
    # its container
    specs = _pod_specs(trainjob["spec"]["runtimePatches"])
    assert specs, "the TrainJob patches no pod spec"
    for pod_spec in specs:
        node = copy.deepcopy(pod_spec)
        node["containers"][0]["env"] = trainjob["spec"]["trainer"]["env"]
        assert admit(vap, {"metadata": {}, "spec": node}, "system:serviceaccount:kube-system:job-controller") == []
    (helm_test,) = hooks(render())
    assert admit(vap, helm_test, "kubernetes-admin") == []
    # the DAG's plan pod, where the Airflow worker has no parathink
    sys.path.insert(0, str(ROOT / "dags"))
    from parathink_airflow.pods import plan_pod_template

    assert admit(vap, plan_pod_template({"PARATHINK_IMAGE": "reg/t@sha256:" + "0" * 64})) == []


def _pod_specs(node) -> list[dict]:
    """Every pod spec inside a manifest (a dict with ``containers``), however deep."""
    if isinstance(node, dict):
        found = [node] if isinstance(node.get("containers"), list) else []
        return found + [s for v in node.values() for s in _pod_specs(v)]
    return [s for v in node for s in _pod_specs(v)] if isinstance(node, list) else []


ADMIN = "parathink-mlflow-admin"


def _attacks() -> dict[str, tuple[callable, str]]:
    """Ways a pod names a Secret (or an identity) it should not have, and the message each gets."""
    mount, env = "may mount only", "may read into its environment only"

    def volume(spec):
        spec.setdefault("volumes", []).append({"name": "x", "secret": {"secretName": ADMIN}})

    def projected(spec):
        spec.setdefault("volumes", []).append({"name": "x", "projected": {"sources": [
            {"configMap": {"name": "c"}}, {"secret": {"name": "parathink-postgres"}}]}})

    def env_ref(spec):
        spec["containers"][0].setdefault("env", []).append(
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "parathink-postgres", "key": "password"}}})

    def env_from(spec):
        spec["containers"][0].setdefault("envFrom", []).append({"secretRef": {"name": ADMIN}})

    def init_container(spec):
        spec["initContainers"] = [{"name": "i", "image": "busybox", "envFrom": [{"secretRef": {"name": ADMIN}}]}]

    def pull_secret(spec):
        spec["imagePullSecrets"] = [{"name": ADMIN}]

    def mlflow_identity(spec):
        spec["serviceAccountName"] = "parathink-mlflow"

    return {"volume": (volume, mount), "projected": (projected, mount), "env": (env_ref, env),
            "envFrom": (env_from, env), "initContainer": (init_container, env), "imagePullSecrets": (pull_secret,
            "may pull with only"), "serviceAccount": (mlflow_identity, "may run only as the runner's")}


@pytest.mark.parametrize("attack", list(_attacks()))
def test_a_pod_naming_another_secret_or_identity_is_refused(capsys, attack):
    vap = policy()
    (pod,) = plan_pods(capsys, "stages=[filter]").values()
    change, message = _attacks()[attack]
    bad = copy.deepcopy(pod)
    change(bad["spec"])
    (refused,) = admit(vap, bad)
    assert message in refused
    assert admit(vap, bad, REPLICASET) == []  # the trusted creator's pods are not checked


def test_mlflow_keeps_its_secrets_and_only_the_replicaset_controller_may_start_it():
    """MLflow's own pod names the admin and database Secrets: created from its Deployment it runs; the same pod
    created by the Airflow worker is refused."""
    vap = policy()
    (deployment,) = [o for o in render() if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-mlflow")]
    pod = {"metadata": {}, "spec": {**deployment["spec"]["template"]["spec"],
                                    "serviceAccountName": deployment["spec"]["template"]["spec"].get(
                                        "serviceAccountName", "default")}}
    assert admit(vap, pod, REPLICASET) == []
    assert len(admit(vap, pod)) >= 1


def test_a_hub_token_secret_is_admitted_once_the_values_list_it(capsys, monkeypatch):
    monkeypatch.setenv("PARATHINK_HF_TOKEN_SECRET", "hub-token")
    base = plan_pods(capsys, "stages=[base]")["base"]
    assert admit(policy(), base) != []  # named in the deployment, not in the chart's list: refused
    listed = {"podPolicy": {"allowedSecrets": ["parathink-s3", "parathink-mlflow", "parathink-mlflow-promote",
                                               "hub-token"]}}
    assert admit(policy(listed), base) == []


def test_the_binding_denies_in_the_release_namespace_and_the_policy_can_be_left_out():
    objects = render()
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["validationActions"] == ["Deny"] and binding["spec"]["policyName"] == \
        policy()["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert policy()["spec"]["failurePolicy"] == "Fail"
    assert not [o for o in render({"podPolicy": {"enabled": False}}) if "Admission" in o["kind"]]

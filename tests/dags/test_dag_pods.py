"""executor=kubernetes: the pods the DAG creates, built from the plan of a GPU experiment, validated against the
Kubernetes schema of a current release (kubernetes-validate) and checked field by field.

The command line `tools/stage_pod.py` prints the same pods; the deployment tests run it against a
real kube-apiserver.
"""

import json
import subprocess

import kubernetes_validate
import pytest
from dag_helpers import ROOT, TOOLS, airflow_env, in_airflow
from pod_security import violations

from parathink.pipeline.compose import compose
from parathink.pipeline.runner import plan_document

K8S_VERSION = kubernetes_validate.latest_version()
STAGES = ["teacher", "filter", "sft", "eval", "promote"]
ARGS = ["experiment=parallel_r1_seen", "run_dir=s3://parathink/runs/t", f"stages=[{','.join(STAGES)}]"]


def _plan(tmp_path, name, *overrides):
    """What `parathink plan ARGS` prints (the same function, called in this process)."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(plan_document(compose([*ARGS, *overrides]), STAGES)))
    return path


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plans")
    return {"gpu": _plan(tmp, "gpu"),
            "pvc": _plan(tmp, "pvc", "run_dir=/runs/t", "cluster.volume={claim: parathink-runs, mount_path: /runs}")}


@pytest.fixture(scope="module")
def pods(airflow_python, plans, tmp_path_factory):
    home = tmp_path_factory.mktemp("pods-home")
    got, _ = in_airflow(airflow_env(home, home), "pods", str(plans["gpu"]), str(plans["pvc"]))
    for plan in got.values():
        for stage in plan.values():
            kubernetes_validate.validate(stage["request"], K8S_VERSION, strict=True)
            assert violations(stage["request"]["spec"]) == []  # Pod Security "restricted"
    return got


def _cli(airflow_python, *args):
    return subprocess.run([str(airflow_python), "-W", "ignore", str(TOOLS / "stage_pod.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_gpu_stage_pod_asks_for_the_gpu_pool(pods):
    pod = pods["gpu"]["sft"]["request"]
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert pod["metadata"]["namespace"] == "parathink" and pod["metadata"]["name"].startswith("parathink-sft-")
    assert pod["metadata"]["labels"]["parathink.io/stage"] == "sft"
    amounts = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}  # hydra_conf/cluster/gpu.yaml
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert spec["nodeSelector"] == {"parathink.io/pool": "gpu"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in spec["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert spec["serviceAccountName"] == "parathink-runner" and spec["restartPolicy"] == "Never"
    assert container["image"] == "ghcr.io/parathink/trainer:0.1.0" and container["command"] == ["parathink"]
    assert container["args"] == ["stage", "sft", *ARGS[:2], "seed=0", ARGS[2]]


def test_the_pod_is_the_one_plan_rendered_plus_the_command_and_airflows_labels(pods, plans):
    """The operator adds the command, its own labels and a name suffix to parathink.placement.podspec's Pod, nothing else."""
    rendered = json.loads(plans["gpu"].read_text())["pods"]["sft"]
    request = pods["gpu"]["sft"]["request"]
    (container,), (mine,) = request["spec"]["containers"], rendered["spec"]["containers"]
    assert {k: container[k] for k in mine} == mine and container["name"] == "main"
    for key in ("securityContext", "volumes", "nodeSelector", "tolerations", "serviceAccountName"):
        assert request["spec"][key] == rendered["spec"][key], key
    assert rendered["metadata"]["labels"].items() <= request["metadata"]["labels"].items()


def test_credentials_come_from_secrets_by_reference_only(pods):
    env = {e["name"]: e for e in pods["gpu"]["sft"]["request"]["spec"]["containers"][0]["env"]}
    assert env["MLFLOW_TRACKING_URI"] == {"name": "MLFLOW_TRACKING_URI", "value": "http://parathink-mlflow:5000"}
    for name, secret, key, optional in [("AWS_ACCESS_KEY_ID", "parathink-s3", "AWS_ACCESS_KEY_ID", True),
                                        ("AWS_SECRET_ACCESS_KEY", "parathink-s3", "AWS_SECRET_ACCESS_KEY", True),
                                        ("MLFLOW_TRACKING_USERNAME", "parathink-mlflow", "username", False),
                                        ("MLFLOW_TRACKING_PASSWORD", "parathink-mlflow", "password", False)]:
        ref = {"name": secret, "key": key, **({"optional": True} if optional else {})}
        assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": ref}}


def test_cpu_stages_and_promote_stay_off_the_gpu_pool(pods):
    for stage in ("filter", "promote"):
        pod = pods["gpu"][stage]["request"]
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8Gi"}
        assert not pod["spec"].get("nodeSelector") and not pod["spec"].get("tolerations")
        assert pod["spec"]["containers"][0]["args"][:2] == ["stage", stage]


def test_run_directories_on_a_pvc_are_mounted(pods):
    pod = pods["pvc"]["teacher"]["request"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "parathink-runs"}} in pod["spec"]["volumes"]
    assert {"name": "runs", "mountPath": "/runs"} in pod["spec"]["containers"][0]["volumeMounts"]
    assert "run_dir=/runs/t" in pod["spec"]["containers"][0]["args"]


def test_the_operator_waits_for_scale_up_and_deletes_only_succeeded_pods(pods):
    assert pods["gpu"]["sft"]["operator"] == {"on_finish_action": "delete_succeeded_pod",
                                               "startup_timeout_seconds": 1800, "get_logs": True,
                                               "log_pod_spec_on_failure": False}


def test_the_command_line_prints_the_pod_and_names_what_is_wrong(airflow_python, plans, tmp_path):
    proc = _cli(airflow_python, "request", "--plan", str(plans["gpu"]), "--stage", "sft", "--", "sft.lr=2e-5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    pod = json.loads(proc.stdout)  # stdout holds the JSON alone (Airflow's logging goes to stderr)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert pod["spec"]["containers"][0]["args"][-1] == "sft.lr=2e-5"
    for args, message in [(["run", "--plan", str(plans["gpu"]), "--stage", "sft"], "run needs --kubeconfig"),
                          (["request", "--plan", str(plans["gpu"]), "--stage", "rl_hard"], "--stage rl_hard: not in"),
                          (["request", "--plan", str(tmp_path / "nope.json"), "--stage", "sft"], "nope.json")]:
        proc = _cli(airflow_python, *args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_each_gpu_pod_runs_one_rank_per_gpu_it_asks_for(pods, plans):
    """The pod's command is `parathink stage NAME ...`; that process starts the launch its placement carries
    (parathink.launch): torchrun with as many ranks as the pod has GPUs, or, for the vLLM teacher, one process whose
    engines take every GPU."""
    placement = json.loads(plans["gpu"].read_text())["placement"]
    for stage in STAGES:
        container = pods["gpu"][stage]["request"]["spec"]["containers"][0]
        assert container["command"] == ["parathink"] and container["args"][:2] == ["stage", stage]
        gpus = int(container["resources"]["limits"].get("nvidia.com/gpu", 0))
        launch, engines = placement[stage]["launch"], placement[stage]["engines"]
        if engines:
            assert launch == ["parathink", "stage", stage] and engines["engines"] * engines["gpus_per_engine"] == gpus
        elif gpus > 1:
            assert launch == ["torchrun", "--nproc_per_node", str(gpus), "-m", "parathink.cli", "stage", stage]
        else:
            assert launch == ["parathink", "stage", stage]
    assert placement["teacher"]["engines"] == {"parallel": "data", "engines": 8, "gpus_per_engine": 1}

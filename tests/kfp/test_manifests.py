"""The Kubernetes objects of a stage: Pods valid for a current Kubernetes release, TrainJobs valid for the Kubeflow
Trainer CRD (its schema vendored in tests/kfp/schemas/), and both saying what the compiled pipeline says."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kfp_helpers import SEEN, SFT_2_NODES, plan_json, task_name
from pod_security import violations

from parathink.kfp.plan import make_plan, objects, stage_objects
from parathink.placement import podspec

K8S_VERSION = kubernetes_validate.utils.latest_version()
TRAINJOB_SCHEMA = yaml.safe_load((Path(__file__).parent / "schemas" / "trainjob.v1alpha1.yaml").read_text())
WITH_PVC = "cluster.volume={claim: parathink-runs, mount_path: /runs}"


def _trainjob_errors(manifest: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(TRAINJOB_SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]


@pytest.fixture(scope="module")
def sft_2_nodes_objects():
    return stage_objects(SFT_2_NODES, "sft")


@pytest.mark.parametrize("overrides", [["experiment=tiny"], SEEN, [*SEEN, WITH_PVC]], ids=["tiny", "seen", "seen_pvc"])
def test_every_stage_pod_is_valid_kubernetes(overrides):
    plan = make_plan(overrides)
    for stage in plan.stages:
        (pod,) = objects(plan, stage)
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)  # raises on any unknown or mistyped field
        assert pod["spec"]["containers"][0]["command"][:3] == ["parathink", "stage", stage]


def test_multi_node_stage_is_a_valid_trainjob_with_the_pool_placement():
    plan = plan_json(*SFT_2_NODES, WITH_PVC)
    p = plan["placement"]["sft"]
    launcher, trainjob = stage_objects([*SFT_2_NODES, WITH_PVC], "sft")
    kubernetes_validate.validate(launcher, K8S_VERSION, strict=True)
    assert launcher["spec"]["containers"][0]["command"][:4] == ["parathink", "kfp", "trainjob", "sft"]
    assert "nvidia.com/gpu" not in launcher["spec"]["containers"][0]["resources"]["limits"]
    assert "nodeSelector" not in launcher["spec"]

    assert _trainjob_errors(trainjob) == []
    owned = objects(make_plan(SFT_2_NODES), "sft", {"apiVersion": "v1", "kind": "Pod", "name": "l", "uid": "u"})[1]
    assert _trainjob_errors(owned) == []
    trainer = trainjob["spec"]["trainer"]
    assert trainjob["spec"]["runtimeRef"]["name"] == p["trainer_runtime"] == "torch-distributed"
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, p["gpus_per_node"])
    assert trainer["resourcesPerNode"]["limits"] == {**p["resources"], "nvidia.com/gpu": str(p["gpus_per_node"])}
    assert trainer["command"][:5] == p["launch"] == ["torchrun", "-m", "parathink.cli", "stage", "sft"]
    assert {"name": "AWS_ACCESS_KEY_ID",
            "valueFrom": {"secretKeyRef": {"name": "parathink-s3", "key": "AWS_ACCESS_KEY_ID", "optional": True}}} \
        in trainer["env"]
    (patch,) = trainjob["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = job["template"]["spec"]["template"]["spec"]
    assert job["name"] == "node"
    assert pod["nodeSelector"] == p["node_selector"] and pod["tolerations"] == p["tolerations"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": p["shm_size"]}} in pod["volumes"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "parathink-runs"}} in pod["volumes"]
    assert {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "200Gi"}}}}}} in pod["volumes"]
    assert pod["containers"] == [{"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                                                   {"name": "runs", "mountPath": "/runs"},
                                                                   {"name": "scratch",
                                                                    "mountPath": "/home/parathink/.cache"}],
                                  "securityContext": podspec.CONTAINER_SECURITY}]
    assert pod["securityContext"]["runAsNonRoot"] is True and violations(pod) == []  # Pod Security "restricted"
    # Only what runtimePatches' pod schema holds: an API server prunes anything else silently.
    patchable = (TRAINJOB_SCHEMA["properties"]["spec"]["properties"]["runtimePatches"]["items"]["properties"]
                 ["trainingRuntimeSpec"]["properties"]["template"]["properties"]["spec"]["properties"]
                 ["replicatedJobs"]["items"]["properties"]["template"]["properties"]["spec"]["properties"]
                 ["template"]["properties"]["spec"]["properties"])
    assert set(pod) <= set(patchable), set(pod) - set(patchable)


@pytest.mark.parametrize("breakage", ["numNodes", "runtimeRef", "manager"])
def test_the_schema_check_catches_a_broken_trainjob(breakage, sft_2_nodes_objects):
    _, trainjob = sft_2_nodes_objects
    broken = copy.deepcopy(trainjob)
    if breakage == "numNodes":
        broken["spec"]["trainer"]["numNodes"] = "two"
    elif breakage == "runtimeRef":
        del broken["spec"]["runtimeRef"]
    else:
        del broken["spec"]["runtimePatches"][0]["manager"]
    assert _trainjob_errors(broken)


def test_pod_says_what_the_compiled_pipeline_says(compile_pipeline):
    """Two translations of one placement (kfp-kubernetes for KFP, plain dicts for the API server) agree."""
    compiled, plan = compile_pipeline(*SEEN), make_plan(SEEN)
    for stage in ("sft", "filter"):
        (pod,) = objects(plan, stage)
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        k8s, kfp_container = compiled.kubernetes(task_name(stage)), compiled.container(task_name(stage))
        assert spec.get("nodeSelector", {}) == k8s.get("nodeSelector", {}).get("labels", {})
        assert spec.get("tolerations", []) == k8s.get("tolerations", [])
        assert container["image"] == kfp_container["image"]
        assert container["resources"]["limits"].get("nvidia.com/gpu") == \
            kfp_container["resources"].get("accelerator", {}).get("resourceCount")
        from_secrets = [(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"], e["name"])
                        for e in container["env"] if "valueFrom" in e]
        assert from_secrets == [(s["secretName"], k["secretKey"], k["envVar"])
                                for s in k8s["secretAsEnv"] for k in s["keyToEnv"]]
        shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]
        assert shm["sizeLimit"] == k8s["emptyDirMounts"][0]["sizeLimit"]


def test_a_single_node_gpu_task_calls_parathink_stage_and_its_placement_gives_it_one_rank_per_gpu():
    """KFP's task on an 8-GPU pod runs `python -m parathink.cli stage NAME` (the component's body), which starts
    the launch its placement carries (parathink.launch): 8 ranks, as many as the pod's GPUs."""
    plan = make_plan(SEEN)
    for stage in ("sft", "rl_easy", "eval"):
        p = plan.placements[stage]
        (pod,) = objects(plan, stage)
        gpus = pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        assert p.launch == ["torchrun", "--nproc_per_node", gpus, "-m", "parathink.cli", "stage", stage]

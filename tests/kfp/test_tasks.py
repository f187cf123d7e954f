"""parathink.kfp.tasks: the rendered Pod (parathink.placement.podspec) carried onto each KFP task, and refused where KFP has no
counterpart for one of its fields (rather than dropped)."""

from __future__ import annotations

import copy

import pytest
from kfp import dsl
from kfp_helpers import SEEN, task_name

from parathink.kfp.tasks import PodNotExpressible, place
from parathink.pipeline.compose import compose
from parathink.placement import cluster, podspec


def test_every_task_runs_as_the_pods_non_root_user_with_its_labels(compile_pipeline):
    compiled = compile_pipeline(*SEEN)
    for stage in ("teacher", "filter", "sft", "eval"):
        k8s = compiled.kubernetes(task_name(stage))
        # KFP's compiler adds no privilege escalation, drop ALL and RuntimeDefault to every task container itself.
        assert k8s["securityContext"] == {"runAsUser": "1000", "runAsGroup": "1000", "runAsNonRoot": True}
        assert int(k8s["activeDeadlineSeconds"]) == (21600 if stage == "filter" else 259200)  # the stage's timeout_s
        hub = {"parathink.io/hub": "true"} if stage == "teacher" else {}  # gpu.yaml hub_stages: base, teacher
        assert k8s["podMetadata"]["labels"] == {"app.kubernetes.io/name": "parathink",
                                                "app.kubernetes.io/component": "stage",
                                                "parathink.io/stage": podspec.k8s_name(stage), **hub}


@pytest.mark.parametrize("change", ["hostPath volume", "container field", "container securityContext", "spec field"])
def test_a_pod_field_kfp_cannot_carry_fails_the_compile(change):
    pod = podspec.pod(cluster.placement(compose(SEEN), "sft"))
    broken = copy.deepcopy(pod)
    spec, (container,) = broken["spec"], broken["spec"]["containers"]
    if change == "hostPath volume":
        spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
        container["volumeMounts"].append({"name": "host", "mountPath": "/host"})
    elif change == "container field":
        container["ports"] = [{"containerPort": 80}]
    elif change == "container securityContext":
        container["securityContext"] = {"privileged": True}
    else:
        spec["hostNetwork"] = True

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def noop():
        pass

    @dsl.pipeline(name="p")
    def p():
        with pytest.raises(PodNotExpressible):
            place(noop(), broken, "sft")
        place(noop(), pod, "sft")  # the Pod as rendered goes through


def test_each_task_gets_a_scratch_its_uid_can_write_sized_for_its_kind(compile_pipeline):
    """gpu.yaml's scratch (over ~/.cache: hub downloads and an s3:// run's local files) is a generic ephemeral volume
    in the Pod, writable by uid 1000 through the Pod's fsGroup; KFP has no fsGroup, so each KFP task gets it as an
    emptyDir of the same size instead (the kubelet makes its folder 0777), and no PVC a non-root stage cannot write."""
    compiled = compile_pipeline(*SEEN)
    for stage, size in (("teacher", "200Gi"), ("filter", "10Gi")):
        k8s = compiled.kubernetes(task_name(stage))
        assert "genericEphemeralVolume" not in k8s and "pvcMount" not in k8s, stage
        assert "fsGroup" not in k8s["securityContext"]  # what kfp-kubernetes cannot say, and why the emptyDir
        scratch = [m for m in k8s["emptyDirMounts"] if m["volumeName"] == "scratch"]
        assert scratch == [{"volumeName": "scratch", "mountPath": "/home/parathink/.cache", "sizeLimit": size}], stage
        assert "medium" not in scratch[0]  # the node's disk, not memory (a memory emptyDir counts against the pod)
        # the Pod rendering itself keeps the PVC and its fsGroup (Airflow and the TrainJob's pods set fsGroup)
        pod = podspec.pod(cluster.placement(compose(SEEN), stage))
        assert pod["spec"]["securityContext"]["fsGroup"] == 1000
        assert any("ephemeral" in v for v in pod["spec"]["volumes"])

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


def test_each_task_gets_the_profiles_scratch_volume_sized_for_its_kind(compile_pipeline):
    """gpu.yaml's scratch (a PVC made and deleted with the pod, over ~/.cache: hub downloads and an s3:// run's local
    files) reaches every KFP task as a generic ephemeral volume; KFP has no ephemeral-storage resource to say it."""
    compiled = compile_pipeline(*SEEN)
    for stage, size in (("teacher", "200Gi"), ("filter", "10Gi")):
        volumes = compiled.kubernetes(task_name(stage))["genericEphemeralVolume"]
        assert volumes == [{"volumeName": "scratch", "mountPath": "/home/parathink/.cache",
                            "accessModes": ["ReadWriteOnce"], "size": size, "defaultStorageClass": True}], stage

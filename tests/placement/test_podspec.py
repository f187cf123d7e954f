"""parathink.placement.podspec: the one rendering of a placement as a Pod, for every stage of every experiment: valid for a
current Kubernetes release, compliant with Pod Security "restricted", and what `parathink plan` hands Airflow."""

import copy
import json
import re

import kubernetes_validate
import pytest
from pod_security import violations

from parathink import cli
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose
from parathink.pipeline.runner import stage_roles
from parathink.placement import cluster, podspec


def plan_of(cfg, names):
    """``cluster.plan`` as the pipeline calls it: each stage with the role its ``StageSpec`` declares."""
    return cluster.plan(cfg, stage_roles(cfg, names))

K8S_VERSION = kubernetes_validate.latest_version()
EXPERIMENTS = ["tiny", "parallel_r1_seen", "npr", "parathinker"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_stage_pod_is_valid_and_restricted(experiment):
    cfg = compose([f"experiment={experiment}", "+cluster.stage_overrides.sft.nodes=1"])
    for stage, p in plan_of(cfg, [*cfg.stages, "promote"]).items():
        pod = podspec.pod(p, ["parathink", "stage", stage])
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        assert violations(pod["spec"]) == [], (experiment, stage)
        hub = {"parathink.io/hub": "true"} if stage in cfg.cluster.hub_stages else {}
        assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": "parathink",
                                             "app.kubernetes.io/component": "stage",
                                             "parathink.io/stage": podspec.k8s_name(stage), **hub}


def test_the_restricted_check_rejects_the_pods_rendered_before_the_security_context():
    """The pods of the three former renderings had no securityContext at all: the check names what they lacked."""
    pod = podspec.pod(cluster.placement(compose(["experiment=parallel_r1_seen"]), "sft"), ["parathink"])
    before = copy.deepcopy(pod["spec"])
    del before["securityContext"], before["containers"][0]["securityContext"]
    assert violations(before) == ["container main: allowPrivilegeEscalation is not false",
                                  "container main: capabilities.drop lacks ALL",
                                  "container main: runAsNonRoot is not true (pod or container)",
                                  "container main: seccompProfile is None, not RuntimeDefault or Localhost"]
    root = copy.deepcopy(pod["spec"])
    root["securityContext"]["runAsUser"] = 0
    assert violations(root) == ["spec.securityContext.runAsUser=0"]


def test_the_pod_runs_as_the_profiles_non_root_user_and_root_is_refused():
    pod = podspec.pod(cluster.placement(compose(["cluster.run_as_user=2000"]), "sft"))
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 2000,
                                              "fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}}
    assert "command" not in pod["spec"]["containers"][0]  # the orchestrator adds it
    with pytest.raises(ConfigError, match=r"cluster.run_as_user: must be an integer >= 1, got 0"):
        cluster.placement(compose(["cluster.run_as_user=0"]), "sft")


def test_a_stage_pod_ends_at_the_profiles_timeout():
    cfg = compose(["experiment=parallel_r1_seen", "+cluster.stage_overrides.sft.timeout_s=7200"])
    assert podspec.pod(cluster.placement(cfg, "rl_hard"))["spec"]["activeDeadlineSeconds"] == 259200
    assert podspec.pod(cluster.placement(cfg, "filter"))["spec"]["activeDeadlineSeconds"] == 21600
    assert podspec.pod(cluster.placement(cfg, "sft"))["spec"]["activeDeadlineSeconds"] == 7200


def test_static_s3_keys_are_optional_so_workload_identity_can_stand_in():
    env = podspec.env(cluster.placement(compose(["experiment=parallel_r1_seen"]), "sft"))
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert refs["AWS_ACCESS_KEY_ID"] == {"name": "parathink-s3", "key": "AWS_ACCESS_KEY_ID", "optional": True}
    assert refs["AWS_SECRET_ACCESS_KEY"]["optional"] is True
    with pytest.raises(ConfigError, match=r"cluster.secrets.X.optional: must be true or false, got 'yes'"):
        cluster.placement(compose(["+cluster.secrets.X={secret: s, key: k, optional: 'yes'}"]), "sft")


def test_plan_prints_each_stages_pod_for_the_orchestrators(capsys):
    code = cli.main(["plan", "experiment=parallel_r1_seen", "stages=[filter,sft]"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and set(doc["pods"]) == {"filter", "sft"}
    cfg = compose(["experiment=parallel_r1_seen"])
    assert doc["pods"]["sft"] == podspec.pod(cluster.placement(cfg, "sft"))


def test_a_gpu_stage_gets_its_scratch_volume_made_and_deleted_with_the_pod():
    """gpu.yaml's scratch: a generic ephemeral volume over ~/.cache (hub downloads, an s3:// run's local files), sized
    per kind of stage; valid for Kubernetes and allowed under Pod Security "restricted"."""
    cfg = compose(["experiment=parallel_r1_seen"])
    for stage, size in (("rl_easy", "200Gi"), ("filter", "10Gi")):
        pod = podspec.pod(cluster.placement(cfg, stage), ["parathink"])
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        assert violations(pod["spec"]) == []
        (scratch,) = [v for v in pod["spec"]["volumes"] if v["name"] == "scratch"]
        assert scratch == {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}}}, stage
        assert {"name": "scratch", "mountPath": "/home/parathink/.cache"} in pod["spec"]["containers"][0]["volumeMounts"]
    named = cluster.placement(compose(["experiment=parallel_r1_seen", "cluster.scratch.storage_class=fast-ssd"]), "sft")
    (scratch,) = [v for v in podspec.pod(named)["spec"]["volumes"] if v["name"] == "scratch"]
    assert scratch["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "fast-ssd"
    off = podspec.pod(cluster.placement(compose(["experiment=parallel_r1_seen", "cluster.scratch=null"]), "sft"))
    assert [v["name"] for v in off["spec"]["volumes"]] == ["dshm"]


@pytest.mark.parametrize("override, message", [
    ("cluster.scratch.size.gpu=lots", "cluster.scratch.size.gpu: 'lots' is not a Kubernetes quantity"),
    ("cluster.scratch.mount_path=cache", "cluster.scratch.mount_path: must be an absolute path"),
    ("+cluster.scratch.medium=Memory", "cluster.scratch: must be null or {mount_path: /path"),
])
def test_a_bad_scratch_setting_is_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        cluster.placement(compose(["experiment=parallel_r1_seen", override]), "sft")

"""helm/parathink without a cluster: Helm 4's linter (helm-python-sdk), every rendered object validated against the
current Kubernetes schema (kubernetes-validate --strict), values.schema.json rejecting wrong values, and the GPU
pool's values kept equal to hydra_conf/cluster/gpu.yaml (what the DAG and the pipeline place their pods with)."""

from __future__ import annotations

import helm_python as helm
import kubernetes_validate
import pytest
from omegaconf import OmegaConf
from parathink_chart import CHART, GPU_PROFILE, gpu_pool_values, installed, render

KUBERNETES = kubernetes_validate.latest_version()
WARNING = 2  # helm lint severities: 1 info, 2 warning, 3 error


def test_lint_strict_finds_no_warning():
    report = helm.lint(str(CHART), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= WARNING] == []


@pytest.mark.parametrize("values", [{}, gpu_pool_values()], ids=["defaults", "gpu-pool"])
def test_every_rendered_object_validates_strictly(values):
    objects = render(values)
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    # The gpu-pool values switch every optional object on: the PVC and the GPU quota render too.
    expected = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy", "Pod",
                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    if values:
        expected |= {"PersistentVolumeClaim", "ResourceQuota"}
    assert {o["kind"] for o in objects} == expected


def _containers(obj: dict) -> list[dict]:
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def test_pods_run_as_non_root_with_requests_and_limits():
    workloads = [o for o in render() if o["kind"] in ("Deployment", "Pod")]
    assert workloads
    for obj in workloads:
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["automountServiceAccountToken"] is False
        for c in _containers(obj):
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (obj["metadata"]["name"], c["name"], kind)


def test_mlflow_credentials_come_only_from_secrets():
    (deployment,) = [o for o in render() if o["kind"] == "Deployment"]
    for c in _containers(deployment):
        env = {e["name"]: e for e in c["env"]}
        assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "parathink-postgres", "key": "password"}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "parathink-s3"
        assert "$(PGPASSWORD)" in env["MLFLOW_BACKEND_STORE_URI"]["value"]
    assert not [o for o in render() if o["kind"] == "Secret"]


def test_mlflow_answers_the_host_that_gpu_yaml_names():
    profile = OmegaConf.load(GPU_PROFILE)
    host = profile.env.MLFLOW_TRACKING_URI.split("//", 1)[1]  # parathink-mlflow:5000
    (deployment,) = [o for o in render() if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    allowed = next(a for a in args if a.startswith("--allowed-hosts=")).split("=", 1)[1].split(",")
    assert host in allowed
    (service,) = [o for o in render() if o["kind"] == "Service"]
    assert f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}" == host


def test_chart_gpu_pool_equals_the_cluster_profile():
    profile = OmegaConf.to_container(OmegaConf.load(GPU_PROFILE))
    with helm.Chart.load(str(CHART)) as chart:
        values = chart.values
    pool = values["gpuPool"]
    assert pool["nodeSelector"] == profile["node_pool"]["node_selector"]
    assert pool["tolerations"] == profile["node_pool"]["tolerations"]
    assert pool["gpusPerNode"] == profile["gpus_per_node"]
    assert pool["gpuResource"] == profile["gpu_resource"]
    assert values["runner"]["serviceAccount"]["name"] == profile["service_account"]
    assert values["mlflow"]["artifacts"]["existingSecret"] == profile["secrets"]["AWS_ACCESS_KEY_ID"]["secret"]
    image = values["trainerImage"]
    assert f"{image['repository']}:{image['tag']}" == profile["image"]


def test_the_roles_grant_only_what_the_orchestrators_use():
    rules = {o["metadata"]["name"]: o["rules"] for o in installed(render()) if o["kind"] == "Role"}
    granted = {(name, g, r, v) for name, rs in rules.items() for rule in rs for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert not [x for x in granted if x[2] in ("pods/exec", "*") or x[3] == "*"]
    assert ("parathink-runner", "", "pods", "create") not in granted
    # Secrets and ConfigMaps: only KFP's launcher's, read by name, by the runner.
    named = [(name, rule) for name, rs in rules.items() for rule in rs if {"secrets", "configmaps"} & set(rule["resources"])]
    assert {name for name, _ in named} == {"parathink-runner"}
    assert all(rule["verbs"] == ["get"] and rule.get("resourceNames") for _, rule in named)


@pytest.mark.parametrize("bad, where", [
    ({"gpuPool": {"gpusPerNode": "8"}}, "/gpuPool/gpusPerNode"),
    ({"gpuPool": {"gpusPerNode": 0}}, "/gpuPool/gpusPerNode"),
    ({"gpuPool": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exist"}]}}, "/gpuPool/tolerations/0/operator"),
    ({"gpuPool": {"gpuResource": "gpu"}}, "/gpuPool/gpuResource"),
    ({"mlflow": {"resources": {"requests": {"cpu": "two"}, "limits": {}}}}, "/mlflow/resources/requests/cpu"),
    ({"mlflow": {"artifacts": {"destination": "/var/mlflow"}}}, "/mlflow/artifacts/destination"),
    ({"mlflow": {"backendStore": {"postgres": {"password": "hunter2"}}}}, "/mlflow/backendStore/postgres"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
    ({"rbac": {"orchestrators": [{"name": "airflow-worker"}]}}, "/rbac/orchestrators/0"),
    ({"gpuPol": {}}, "gpuPol"),
], ids=lambda v: str(v)[:40])
def test_schema_rejects_a_wrong_value_naming_it(bad, where):
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.render(bad, name="parathink", namespace="parathink")
    assert where in str(err.value), str(err.value)


def test_airflow_chart_values_match_the_images_and_the_rbac():
    """helm/airflow-values.yaml (for the official Airflow chart) runs the orchestrator image's Airflow under the
    service accounts that this chart's orchestrator Role is bound to."""
    import yaml

    airflow = yaml.safe_load((CHART.parent / "airflow-values.yaml").read_text())
    with helm.Chart.load(str(CHART)) as chart:
        orchestrators = chart.values["rbac"]["orchestrators"]
    pins = dict(line.split("==") for line in (CHART.parents[1] / "images/orchestrator/requirements.txt").read_text()
                .split() if "==" in line)
    assert airflow["airflowVersion"] == airflow["defaultAirflowTag"] == pins["apache-airflow"]
    assert airflow["images"]["airflow"]["repository"].endswith("/orchestrator")
    assert airflow["executor"] in ("KubernetesExecutor", "LocalExecutor")
    bound = {(o["namespace"], o["name"]) for o in orchestrators}
    for component in ("workers", "scheduler"):
        assert ("airflow", airflow[component]["serviceAccount"]["name"]) in bound
    # credentials: only the names of Secrets, never a value
    assert all(k.endswith("SecretName") for k in airflow if "ecret" in k)
    assert set(airflow["data"]) == {"metadataSecretName"}


def _by_name(objects: list[dict], kind: str, suffix: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return obj


def test_mlflow_asks_for_a_login_whose_secrets_never_appear_in_the_manifest():
    objects = render()
    deployment = _by_name(objects, "Deployment", "-mlflow")
    spec = deployment["spec"]["template"]["spec"]
    (server,) = spec["containers"]
    assert "--app-name=basic-auth" in server["args"]
    env = {e["name"]: e for e in server["env"]}
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "parathink-mlflow-admin",
                                                                               "key": "password"}
    assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == "/auth/basic_auth.ini"
    # The auth app's user database on the same Postgres, its password only as $(PGPASSWORD), expanded by the kubelet.
    auth_init = next(c for c in spec["initContainers"] if c["name"] == "auth-config")
    uri = {e["name"]: e for e in auth_init["env"]}["MLFLOW_AUTH_DATABASE_URI"]["value"]
    assert uri.startswith("postgresql://$(PGUSER):$(PGPASSWORD)@parathink-postgres:5432/mlflow_auth?")
    assert {"name": "auth", "mountPath": "/auth", "readOnly": True} in server["volumeMounts"]
    off = _by_name(render({"mlflow": {"auth": {"enabled": False}}}), "Deployment", "-mlflow")
    assert "--app-name=basic-auth" not in off["spec"]["template"]["spec"]["containers"][0]["args"]


def test_static_s3_keys_are_optional_and_service_accounts_take_cloud_identity():
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/parathink"}
    objects = render({"runner": {"serviceAccount": {"annotations": role}},
                      "mlflow": {"serviceAccount": {"annotations": role}}})
    for suffix in ("parathink-runner", "-mlflow"):
        assert _by_name(objects, "ServiceAccount", suffix)["metadata"]["annotations"] == role
    server = _by_name(objects, "Deployment", "-mlflow")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in server["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["optional"] is True


def test_egress_is_dns_this_namespace_object_storage_and_the_hub_only_for_stages_that_download():
    values = {"networkPolicy": {"egress": {"objectStoreCIDRs": ["52.216.0.0/15"], "hubCIDRs": ["10.9.0.0/16"],
                                           "apiServerCIDRs": ["10.0.0.1/32"]}}}
    objects = render(values)
    egress = _by_name(objects, "NetworkPolicy", "-egress")["spec"]
    assert egress["podSelector"] == {} and egress["policyTypes"] == ["Egress"]
    to = [rule.get("to") for rule in egress["egress"]]
    assert to == [[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
                  [{"podSelector": {}}], [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
                  [{"ipBlock": {"cidr": "52.216.0.0/15"}}]]
    hub = _by_name(objects, "NetworkPolicy", "-hub")["spec"]
    assert hub["podSelector"] == {"matchLabels": {"parathink.io/hub": "true"}}
    assert hub["egress"] == [{"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}], "ports": [{"port": 443, "protocol": "TCP"}]}]
    # The stages that download weights carry the label (hydra_conf/cluster/gpu.yaml hub_stages); the others do not.
    from parathink.pipeline.compose import compose
    from parathink.placement import cluster, podspec

    cfg = compose(["experiment=parallel_r1_seen"])
    labelled = {s for s in ("base", "teacher", "sft", "eval")
                if podspec.labels(cluster.placement(cfg, s)).get("parathink.io/hub") == "true"}
    assert labelled == {"base", "teacher"}


def test_kfp_task_pods_reach_kfps_control_plane_only_while_kfp_runs_tasks_here():
    """KFP's driver and launcher run inside every KFP task pod and call the KFP API server (8887), ML Metadata (8080)
    and KFP's object store (MinIO 9000, SeaweedFS 8333) in KFP's namespace; nothing of it when KFP is off here."""
    kfp = _by_name(render(), "NetworkPolicy", "-kfp")["spec"]
    assert kfp["podSelector"] == {} and kfp["policyTypes"] == ["Egress"]
    assert kfp["egress"] == [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}}}],
                              "ports": [{"port": p, "protocol": "TCP"} for p in (8887, 8080, 9000, 8333)]}]
    moved = render({"networkPolicy": {"egress": {"kfpControlPlane": {"namespace": "kfp", "ports": [8887, 9000]}}}})
    (rule,) = _by_name(moved, "NetworkPolicy", "-kfp")["spec"]["egress"]
    assert rule["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kfp"}
    assert [p["port"] for p in rule["ports"]] == [8887, 9000]
    off = render({"rbac": {"kfpTasks": False}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-kfp")]
    assert _by_name(off, "NetworkPolicy", "-egress")  # the rest of the egress policy stays
    for bad in ({"ports": []}, {"ports": [70000]}, {"namespace": "Kube_flow"}):
        with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError, match="kfpControlPlane"):
            chart.render({"networkPolicy": {"egress": {"kfpControlPlane": bad}}}, name="parathink",
                         namespace="parathink")


def test_airflow_values_keep_task_logs_in_s3_pin_the_chart_and_set_defaults_that_run_there():
    """KubernetesExecutor deletes a worker pod when its task ends: the log must be in S3 by then (the official chart
    is not on a package registry, so its rendering of these values is not tested here; its version is pinned)."""
    import yaml
    from omegaconf import OmegaConf

    text = (CHART.parent / "airflow-values.yaml").read_text()
    airflow = yaml.safe_load(text)
    assert "helm install airflow apache-airflow/airflow --version 1.22.0" in text
    logging = airflow["config"]["logging"]
    assert logging["remote_logging"] == "True" and logging["remote_log_conn_id"] == "aws_default"
    env = {e["name"]: e["value"] for e in airflow["env"]}
    runs_root = env["PARATHINK_RUNS_ROOT"]
    assert logging["remote_base_log_folder"].split("/")[2] == runs_root.split("/")[2]  # the same bucket
    assert OmegaConf.load(GPU_PROFILE).runs_root == runs_root
    # The orchestrator image plans only: its defaults run stages in pods, on the GPU profile, from a real experiment.
    assert env["PARATHINK_DEFAULT_EXECUTOR"] == "kubernetes" and env["PARATHINK_CLUSTER"] == "gpu"
    assert (CHART.parents[1] / "hydra_conf" / "experiment" / f"{env['PARATHINK_DEFAULT_EXPERIMENT']}.yaml").is_file()

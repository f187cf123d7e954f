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
    expected = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy", "Pod"}
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
    assert not [x for x in granted if x[2] in ("secrets", "configmaps", "pods/exec", "*") or x[3] == "*"]
    assert ("parathink-runner", "", "pods", "create") not in granted


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

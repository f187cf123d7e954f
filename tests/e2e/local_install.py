"""What `make kube-up` installs on the local cluster once it is up: the namespace `parathink`, the Secrets that
docs/deploy.md has a platform team create, stand-ins for the managed services the chart expects outside it
(Postgres: images/offline/postgres, Debian's postgresql; S3: images/offline/s3, moto's server, with the bucket),
and helm/parathink itself, rendered by Helm's own engine (helm-python-sdk, as tests/deploy) and applied
server-side, with the values of a machine without a registry (VALUES below). Returns when MLflow's Deployment is
Ready. Idempotent: every object is applied, not created.
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "deploy"))
sys.path.insert(0, str(HERE))

from built_images import PREFIX, version  # noqa: E402

NAMESPACE = "parathink"
S3_BUCKET = "parathink"
# Test values, not credentials: the stand-ins accept anything, and they are never reachable from outside the node.
# MLflow's basic-auth admin is also the stages' user (the chart's `parathink-mlflow` Secret, and promote's
# `parathink-mlflow-promote`): one user locally.
MLFLOW_USER = {"username": "parathink", "password": "local-test-password"}
SECRETS = {"parathink-s3": {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
           "parathink-mlflow": MLFLOW_USER, "parathink-mlflow-promote": MLFLOW_USER,
           "parathink-mlflow-admin": {**MLFLOW_USER, "flask-secret-key": "local-test-csrf-key"},
           "parathink-postgres": {"username": "mlflow", "password": "local-test"}}
READY_TIMEOUT_S = 600


def chart_values() -> dict:
    """The chart's values here: the images `make images` built (imported, never pulled), the stand-ins' addresses,
    Postgres without TLS (the stand-in has no certificate), small requests (the node has 2 CPUs), no pod policy."""
    return {
        "trainerImage": {"repository": f"{PREFIX}/trainer-cpu", "tag": version(), "pullPolicy": "Never"},
        "mlflow": {"image": {"repository": f"{PREFIX}/mlflow", "tag": version(), "pullPolicy": "Never"},
                   "workers": 1,
                   "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                                 "limits": {"cpu": "1", "memory": "2Gi"}},
                   "backendStore": {"postgres": {"sslmode": "disable"}},
                   "artifacts": {"s3EndpointUrl": "http://parathink-s3:5000"}},
        # This cluster's API server (1.20) has no ValidatingAdmissionPolicy (1.30): tests/deploy/test_pod_policy.py
        # evaluates the chart's pod policy with cel-python instead.
        "podPolicy": {"enabled": False},
    }


def stand_in(name: str, image: str, port: int, env: list[dict], run_as: int) -> list[dict]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "parathink-local"}
    pod = {"metadata": {"labels": labels},
           "spec": {"automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": run_as, "runAsGroup": run_as,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": name, "image": image, "imagePullPolicy": "Never", "env": env,
                                    "ports": [{"containerPort": port, "protocol": "TCP"}],
                                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 2},
                                    "securityContext": {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}},
                                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                                  "limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
         "spec": {"selector": labels, "ports": [{"port": port, "targetPort": port, "protocol": "TCP"}]}},
    ]


def objects() -> list[dict]:
    from parathink_chart import installed, render
    secret_env = [{"name": env, "valueFrom": {"secretKeyRef": {"name": "parathink-postgres", "key": key}}}
                  for env, key in (("POSTGRES_USER", "username"), ("POSTGRES_PASSWORD", "password"))]
    base = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in (NAMESPACE, "airflow")]
    base += [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NAMESPACE},
              "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
             for name, data in SECRETS.items()]
    base += stand_in("parathink-postgres", f"{PREFIX}/postgres-offline:{version()}", 5432,
                     secret_env + [{"name": "POSTGRES_DB", "value": "mlflow mlflow_auth"}], 999)
    base += stand_in("parathink-s3", f"{PREFIX}/s3-offline:{version()}", 5000, [], 1000)
    return base + installed(render(chart_values()))


def apply(api, objs: list[dict]) -> None:
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(api)
    for obj in objs:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                                   field_manager="parathink-local", force_conflicts=True)


def wait_ready(api, name: str) -> None:
    from kubernetes import client
    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        d = apps.read_namespaced_deployment(name, NAMESPACE)
        if (d.status.ready_replicas or 0) >= (d.spec.replicas or 1):
            return
        time.sleep(1)
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=",".join(
        f"{k}={v}" for k, v in d.spec.selector.match_labels.items()))
    states = [(p.metadata.name, p.status.phase,
               [(c.name, c.state.to_dict()) for c in p.status.container_statuses or []]) for p in pods.items]
    raise RuntimeError(f"deployment {name} not Ready after {READY_TIMEOUT_S} s: {states}")


def service_url(api, name: str, port: int) -> str:
    from kubernetes import client
    return f"http://{client.CoreV1Api(api).read_namespaced_service(name, NAMESPACE).spec.cluster_ip}:{port}"


def make_bucket(api) -> None:
    """The bucket of run directories and MLflow's artifacts, through the Service (kube-proxy's rules on the host)."""
    import boto3
    s3 = boto3.client("s3", endpoint_url=service_url(api, "parathink-s3", 5000), region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    if S3_BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=S3_BUCKET)


def install(kubeconfig: Path) -> None:
    from kubernetes import config
    api = config.new_client_from_config(str(kubeconfig))
    apply(api, objects())
    for name in ("parathink-postgres", "parathink-s3"):
        wait_ready(api, name)
    make_bucket(api)
    wait_ready(api, "parathink-mlflow")


if __name__ == "__main__":
    install(Path(sys.argv[1]))

"""The chart rendered as the tests use it: helm-python-sdk (Helm 4's own engine, no helm binary) renders
helm/parathink, and the manifests come back as one dict per Kubernetes object."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "parathink"
GPU_PROFILE = ROOT / "hydra_conf" / "cluster" / "gpu.yaml"
RELEASE = NAMESPACE = "parathink"
TEST_HOOK = "test"


def render(values: dict | None = None) -> list[dict]:
    """Every object the chart renders with ``values`` (the chart's own defaults beneath), hooks included."""
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(files.items()):
        if path.endswith(".yaml"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def installed(objects: list[dict]) -> list[dict]:
    """What `helm install` creates: everything but the `helm test` hooks."""
    return [o for o in objects if o["metadata"].get("annotations", {}).get("helm.sh/hook") != TEST_HOOK]


def hooks(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["metadata"].get("annotations", {}).get("helm.sh/hook") == TEST_HOOK]


def gpu_pool_values() -> dict:
    """A platform team's values for a GPU pool that differs from the default (node labels, taint, 4 GPUs), with
    the optional objects switched on: every template renders."""
    return {"gpuPool": {"nodeSelector": {"cloud.example.com/accelerator": "h100"},
                        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "training",
                                         "effect": "NoSchedule"}],
                        "gpusPerNode": 4, "maxGpus": 16},
            "runs": {"persistence": {"enabled": True, "storageClassName": "filestore"}},
            "mlflow": {"allowedHosts": ["mlflow.example.com"], "artifacts": {"s3EndpointUrl": "http://minio:9000"}}}

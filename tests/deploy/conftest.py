"""Session fixtures of the deployment tests: the cluster (kube_cluster.py) and the chart installed on it."""

from __future__ import annotations

import pytest
from kube_cluster import ORCHESTRATOR_NS, SECRETS, Cluster, apply, make_kubelets
from kube_control_plane import ensure_token_secret, running
from kubernetes import client, config
from parathink_chart import NAMESPACE, installed, render


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    started = {}
    with running(tmp_path_factory.mktemp("kube")) as plane:
        try:
            api = config.new_client_from_config(str(plane.admin_kubeconfig))
            for name, kubelet in make_kubelets(plane, api).items():
                started[name] = kubelet.start()
            yield Cluster(plane, api, client.CoreV1Api(api), started)
        finally:
            for kubelet in started.values():
                kubelet.stop()


@pytest.fixture(scope="session")
def chart_installed(cluster) -> list[dict]:
    """The chart with its default values (the pool of gpu.yaml) installed in its namespace; returns its objects."""
    # docs/deploy.md's day one labels parathink's namespace for Pod Security "restricted". This 1.20 API server has no
    # PodSecurity admission (1.23+), so the label is inert here; tests/pod_security.py checks the profile instead.
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    for ns, labels in ((NAMESPACE, restricted), (ORCHESTRATOR_NS, {})):
        cluster.core.create_namespace({"metadata": {"name": ns, "labels": labels}})
    for name, data in SECRETS.items():  # what docs/deploy.md has the platform team create before the install
        cluster.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": name}, "stringData": data})
    # Nor ValidatingAdmissionPolicy (1.30): the chart's pod policy is left out here and checked with cel-python
    # (tests/deploy/test_pod_policy.py).
    objects = installed(render({"podPolicy": {"enabled": False}}))
    apply(cluster.api, objects)
    for sa in [o for o in objects if o["kind"] == "ServiceAccount"]:
        ensure_token_secret(cluster.core, NAMESPACE, sa["metadata"]["name"])
    return objects

"""The stages' Pods created on a real kube-apiserver: the control plane of tests/deploy/ (1.20, built by
`make kube-control-plane`), which validates them with its own API types and admission plugins.

The TrainJobs are checked against the CRD's schema (test_manifests.py) and the launcher against kube_api.py:
this API server panics on every custom-resource create (kube_api.py says where).
"""

from __future__ import annotations

import ssl
import sys

import httpx
import pytest
from kfp_helpers import ROOT, SEEN, SFT_2_NODES

from parathink.kfp.launch import KubeAPI
from parathink.kfp.plan import make_plan, objects

sys.path.insert(0, str(ROOT / "tests" / "deploy"))
from kube_control_plane import ADMIN, ControlPlane, ControlPlaneError  # noqa: E402  (tests/deploy's control plane)

NAMESPACE, ACCOUNT = "parathink", "parathink-runner"


def _namespace_and_account(http: httpx.Client) -> None:
    """The namespace and the service account, with the token Secret the ServiceAccount admission plugin wants
    (no controller-manager makes it here)."""
    for path, body in [
        ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
        (f"/api/v1/namespaces/{NAMESPACE}/secrets",
         {"metadata": {"name": f"{ACCOUNT}-token", "annotations": {"kubernetes.io/service-account.name": ACCOUNT}},
          "type": "kubernetes.io/service-account-token", "data": {"token": "", "ca.crt": "", "namespace": ""}}),
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
         {"metadata": {"name": ACCOUNT}, "secrets": [{"name": f"{ACCOUNT}-token"}]}),
    ]:
        r = http.post(path, json=body)
        assert r.status_code == 201, (path, r.text[:500])


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    try:
        plane = ControlPlane(tmp_path_factory.mktemp("kube")).start()
    except ControlPlaneError as err:
        pytest.fail(str(err))
    try:
        tls = ssl.create_default_context(cafile=str(plane.pki.ca_path))
        tls.load_cert_chain(*map(str, plane.pki.issue("kfp-test", *ADMIN[1:])))  # a cluster admin
        http = httpx.Client(base_url=plane.url, verify=tls, timeout=30)
        _namespace_and_account(http)
        yield KubeAPI(plane.url, client=http)
    finally:
        plane.stop()


@pytest.mark.slow
def test_every_stage_pod_is_accepted_by_the_api_server(kube):
    """The Pod of every stage of the GPU experiment, and the launcher Pod of a two-node sft."""
    plan, multi = make_plan(SEEN), make_plan(SFT_2_NODES)
    pods = [objects(plan, stage)[0] for stage in plan.stages] + [objects(multi, "sft")[0]]
    for i, pod in enumerate(pods):
        pod["metadata"]["name"] += f"-{i}"
        kube.create(pod)
        stored = kube.get(pod)["spec"]
        assert stored.get("nodeSelector") == pod["spec"].get("nodeSelector")
        assert stored["containers"][0]["resources"] == pod["spec"]["containers"][0]["resources"]
        assert stored["volumes"][0] == pod["spec"]["volumes"][0]  # the memory-backed /dev/shm
        # the API server added only its defaults to the tolerations (NoExecute ones for node conditions)
        assert all(t in stored["tolerations"] for t in pod["spec"].get("tolerations", []))


@pytest.mark.slow
def test_the_launcher_finds_its_own_pod_to_own_the_trainjob(kube):
    plan = make_plan(SFT_2_NODES)
    launcher = objects(plan, "sft")[0]
    launcher["metadata"]["name"] = "parathink-sft-launcher"
    kube.create(launcher)
    owner = kube.pod_reference(NAMESPACE, "parathink-sft-launcher")
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "parathink-sft-launcher",
                     "uid": kube.get(launcher)["metadata"]["uid"]}
    (_, trainjob) = objects(plan, "sft", owner)
    assert trainjob["metadata"]["ownerReferences"] == [owner]

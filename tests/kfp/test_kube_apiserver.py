"""The KFP side on a real kube-apiserver (the control plane of tests/deploy/, 1.20, built by
`make kube-control-plane`): the stages' Pods, the TrainJob CRD installed from the vendored schema, and the
TrainJob launcher creating, watching and deleting TrainJobs through it.

There is no Kubeflow Trainer controller here: the test plays it, writing through the status subresource what a
controller writes (``jobsStatus``, then a ``Complete`` or ``Failed`` condition).
"""

from __future__ import annotations

import os
import signal
import ssl
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from kfp_helpers import ROOT, SEEN, SFT_2_NODES

from parathink.kfp.launch import GET_FAILURES, KubeAPI, KubeError, launch, main_trainjob
from parathink.kfp.manifests import TRAINER_GROUP
from parathink.kfp.plan import make_plan, objects

sys.path.insert(0, str(ROOT / "tests" / "deploy"))
from kube_control_plane import ADMIN, ControlPlane, ControlPlaneError

pytestmark = pytest.mark.slow  # the control plane starts once for the module (about 8 s)
NAMESPACE, ACCOUNT = "parathink", "parathink-runner"
SCHEMA = yaml.safe_load((Path(__file__).parent / "schemas" / "trainjob.v1alpha1.yaml").read_text())


def _for_kubernetes_1_20(node):
    """The vendored schema as a 1.20 API server takes it: it reads ``default: ""`` as null (and refuses it), and
    then wants a default for every list-map key; so empty defaults go and list-maps become atomic lists. Neither
    changes what our manifests are checked for (types, required fields, bounds, enums)."""
    if isinstance(node, list):
        return [_for_kubernetes_1_20(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _for_kubernetes_1_20(v) for k, v in node.items()
           if not (k == "default" and v == "") and k != "x-kubernetes-list-map-keys"}
    if out.get("x-kubernetes-list-type") == "map":
        out["x-kubernetes-list-type"] = "atomic"
    return out


def _crd() -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"trainjobs.{TRAINER_GROUP}"},
            "spec": {"group": TRAINER_GROUP, "scope": "Namespaced",
                     "names": {"kind": "TrainJob", "listKind": "TrainJobList", "plural": "trainjobs",
                               "singular": "trainjob"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": _for_kubernetes_1_20(SCHEMA)},
                                   "subresources": {"status": {}}}]}}


def _setup(http: httpx.Client) -> None:
    """The namespace, the service account with the token Secret the ServiceAccount admission plugin wants (no
    controller-manager makes it here), and the TrainJob CRD, established."""
    for path, body in [
        ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
        (f"/api/v1/namespaces/{NAMESPACE}/secrets",
         {"metadata": {"name": f"{ACCOUNT}-token", "annotations": {"kubernetes.io/service-account.name": ACCOUNT}},
          "type": "kubernetes.io/service-account-token", "data": {"token": "", "ca.crt": "", "namespace": ""}}),
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
         {"metadata": {"name": ACCOUNT}, "secrets": [{"name": f"{ACCOUNT}-token"}]}),
        ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd()),
    ]:
        r = http.post(path, json=body)
        assert r.status_code == 201, (path, r.text[:500])
    for _ in range(150):
        crd = http.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainjobs.{TRAINER_GROUP}").json()
        if any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.2)
    pytest.fail("the TrainJob CRD was not established")


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
        _setup(http)
        yield KubeAPI(plane.url, client=http)
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def trainjob():
    """A fresh TrainJob manifest of a two-node sft per call (each launch has its own name)."""
    plan = make_plan(SFT_2_NODES)
    return lambda: objects(plan, "sft")[1]


def _gone(api: KubeAPI, manifest: dict) -> bool:
    try:
        api.get(manifest)
        return False
    except KubeError as err:
        return err.status == 404


def _controller(api: KubeAPI, name: str, outcome: str | None) -> threading.Thread:
    """The Trainer controller's part: once the TrainJob ``name`` exists, its node job becomes ready, then
    ``outcome`` (``Complete`` / ``Failed``)."""
    path = f"/apis/{TRAINER_GROUP}/v1alpha1/namespaces/{NAMESPACE}/trainjobs/{name}"

    def status(body: dict) -> None:
        api.http.patch(f"{path}/status", json={"status": body},
                       headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()

    def play():
        while api.http.get(path).status_code == 404:
            time.sleep(0.02)
        status({"jobsStatus": [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2,
                                "suspended": 0}]})
        if outcome:
            time.sleep(0.1)
            status({"conditions": [{"type": outcome, "status": "True", "reason": f"Jobs{outcome}",
                                    "message": f"jobset {outcome.lower()}",
                                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]})

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


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


def test_the_api_server_validates_trainjobs_with_the_crd_schema(kube, trainjob):
    manifest = trainjob()
    kube.create(manifest)
    stored = kube.get(manifest)["spec"]
    assert stored["trainer"] == manifest["spec"]["trainer"]  # nothing pruned: every field is in the schema
    assert stored["runtimePatches"] == manifest["spec"]["runtimePatches"]
    broken = trainjob()
    broken["spec"]["trainer"]["numNodes"] = "two"
    with pytest.raises(KubeError, match="numNodes in body must be of type integer"):
        kube.create(broken)


def test_the_launcher_waits_for_complete(kube, monkeypatch):
    created = {}
    real_create = kube.create

    def create(manifest, dry_run=False):  # the controller starts watching for the name the launcher picked
        if not dry_run:
            created["manifest"] = manifest
            _controller(kube, manifest["metadata"]["name"], "Complete")
        return real_create(manifest, dry_run)

    monkeypatch.setattr(kube, "create", create)
    assert main_trainjob("sft", [*SFT_2_NODES, "run_dir=s3://bucket/runs/a"], api=kube, poll_s=0.02) == 0
    monkeypatch.undo()
    command = kube.get(created["manifest"])["spec"]["trainer"]["command"]
    assert command[:6] == ["torchrun", "-m", "parathink.cli", "stage", "sft", "run_dir=s3://bucket/runs/a"]


def test_a_failed_trainjob_exits_1(kube, trainjob):
    manifest = trainjob()
    _controller(kube, manifest["metadata"]["name"], "Failed")
    assert launch(kube, manifest, startup_timeout_s=600, poll_s=0.02) == 1


def test_a_trainjob_that_never_starts_is_deleted(kube, trainjob):
    manifest = trainjob()
    assert launch(kube, manifest, startup_timeout_s=0.3, poll_s=0.02) == 1
    assert _gone(kube, manifest)


def test_a_stopped_launcher_deletes_its_trainjob(kube, trainjob):
    manifest = trainjob()
    running = _controller(kube, manifest["metadata"]["name"], None)

    def stop_when_running():
        running.join()
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)  # what the launcher gets when its KFP task is stopped

    threading.Thread(target=stop_when_running, daemon=True).start()
    assert launch(kube, manifest, startup_timeout_s=600, poll_s=0.02) == 130
    assert _gone(kube, manifest)


def _failing_reads(api: KubeAPI, monkeypatch, n: int) -> None:
    """The next ``n`` status reads fail as they do while the API server restarts."""
    real_get, left = api.get, [n]

    def get(manifest):
        if left[0] > 0:
            left[0] -= 1
            raise KubeError("GET: HTTP 503: the API server is restarting", 503)
        return real_get(manifest)

    monkeypatch.setattr(api, "get", get)


def test_a_few_failed_status_reads_are_waited_out(kube, trainjob, monkeypatch):
    manifest = trainjob()
    _failing_reads(kube, monkeypatch, GET_FAILURES - 1)
    _controller(kube, manifest["metadata"]["name"], "Complete")
    assert launch(kube, manifest, startup_timeout_s=600, poll_s=0.02) == 0


def test_an_api_server_that_stays_away_fails_the_launch_and_deletes_the_trainjob(kube, trainjob, monkeypatch):
    manifest = trainjob()
    _failing_reads(kube, monkeypatch, GET_FAILURES)
    with pytest.raises(KubeError, match="HTTP 503"):
        launch(kube, manifest, startup_timeout_s=600, poll_s=0.02)
    monkeypatch.undo()
    assert _gone(kube, manifest)  # the component's retry creates a new TrainJob: this one must not train beside it


def test_the_launcher_finds_its_own_pod_to_own_the_trainjob(kube):
    plan = make_plan(SFT_2_NODES)
    launcher = objects(plan, "sft")[0]
    launcher["metadata"]["name"] = "parathink-sft-launcher"
    kube.create(launcher)
    owner = kube.pod_reference(NAMESPACE, "parathink-sft-launcher")
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "parathink-sft-launcher",
                     "uid": kube.get(launcher)["metadata"]["uid"]}
    (_, trainjob) = objects(plan, "sft", owner)
    kube.create(trainjob)
    assert kube.get(trainjob)["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]


def _set_crd_schema(http: httpx.Client, schema: dict) -> None:
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainjobs.{TRAINER_GROUP}"
    crd = http.get(path).json()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    r = http.put(path, json=crd)
    assert r.status_code == 200, r.text[:500]
    time.sleep(1.0)  # the API server's CRD handler picks up the new schema


def test_a_trainer_older_than_v2_2_is_refused_before_anything_is_created(kube, trainjob, capsys):
    """Trainer's CRD before v2.2 has no spec.runtimePatches: the API server would prune it silently (the pods losing
    the pool's tolerations, /dev/shm and the service account). The launcher asks with a dry run and exits 2."""
    old = _for_kubernetes_1_20(SCHEMA)
    del old["properties"]["spec"]["properties"]["runtimePatches"]
    _set_crd_schema(kube.http, old)
    try:
        code = main_trainjob("sft", [*SFT_2_NODES, "run_dir=s3://bucket/runs/old"], api=kube, poll_s=0.02)
        err = capsys.readouterr().err.strip().splitlines()
        listed = kube.http.get(f"/apis/{TRAINER_GROUP}/v1alpha1/namespaces/{NAMESPACE}/trainjobs").json()["items"]
    finally:
        _set_crd_schema(kube.http, _for_kubernetes_1_20(SCHEMA))
    assert code == 2 and err == ["parathink: error: Kubeflow Trainer on this cluster drops spec.runtimePatches from "
                                 "TrainJobs (a CRD older than v2.2.0); parathink's multi-node stages need Kubeflow "
                                 "Trainer >= v2.2.0"]
    assert not [t for t in listed if "run_dir=s3://bucket/runs/old" in t["spec"]["trainer"]["command"]]
    manifest = trainjob()
    from parathink.kfp.launch import check_trainer

    check_trainer(kube, manifest)  # the current schema keeps it
    assert _gone(kube, manifest)  # a dry run stores nothing

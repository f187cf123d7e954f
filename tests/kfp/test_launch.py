"""`parathink kfp trainjob`: create the TrainJob of a multi-node stage, wait for it, delete it when stopped
(against kube_api.py; the module says why not the real API server). The test plays the Trainer controller."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from kfp_helpers import SFT_2_NODES
from kube_api import KubeApiServer

from parathink.kfp.launch import GET_FAILURES, KubeAPI, KubeError, launch, main_trainjob
from parathink.kfp.plan import make_plan, objects


@pytest.fixture
def kube():
    with KubeApiServer() as server:
        yield server, KubeAPI(server.url)


@pytest.fixture(scope="module")
def trainjob():
    """A fresh TrainJob manifest of a two-node sft per call (each launch has its own name)."""
    plan = make_plan(SFT_2_NODES)
    return lambda: objects(plan, "sft")[1]


def _controller(server: KubeApiServer, outcome: str | None) -> threading.Thread:
    """The Trainer controller's part: once a TrainJob exists, its node job becomes ready, then ``outcome``."""

    def play():
        while not server.objects:
            time.sleep(0.01)
        (obj,) = server.objects.values()
        obj["status"] = {"jobsStatus": [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2}]}
        if outcome:
            time.sleep(0.1)
            obj["status"]["conditions"] = [{"type": outcome, "status": "True", "reason": f"Jobs{outcome}",
                                            "message": f"jobset {outcome.lower()}"}]

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def test_launcher_creates_the_trainjob_and_waits_for_complete(kube):
    server, api = kube
    _controller(server, "Complete")
    assert main_trainjob("sft", [*SFT_2_NODES, "run_dir=s3://bucket/runs/a"], api=api, poll_s=0.02) == 0
    (created,) = [c for c in server.calls if c[0] == "POST"]
    assert created[1] == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/parathink/trainjobs"
    (job,) = server.objects.values()
    assert job["spec"]["trainer"]["command"][:6] == ["torchrun", "-m", "parathink.cli", "stage", "sft",
                                                     "run_dir=s3://bucket/runs/a"]
    assert job["spec"]["trainer"]["numNodes"] == 2


def test_a_failed_trainjob_exits_1(kube, trainjob):
    server, api = kube
    _controller(server, "Failed")
    assert launch(api, trainjob(), startup_timeout_s=600, poll_s=0.02) == 1


def test_a_trainjob_that_never_starts_is_deleted(kube, trainjob):
    server, api = kube
    manifest = trainjob()
    assert launch(api, manifest, startup_timeout_s=0.2, poll_s=0.02) == 1
    assert server.deleted == [manifest["metadata"]["name"]] and not server.objects


def test_a_stopped_launcher_deletes_its_trainjob(kube, trainjob):
    server, api = kube
    manifest = trainjob()
    running = _controller(server, None)

    def stop_when_running():
        running.join()
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)  # what the kubelet sends when the KFP run is stopped

    threading.Thread(target=stop_when_running, daemon=True).start()
    assert launch(api, manifest, startup_timeout_s=600, poll_s=0.02) == 130
    assert server.deleted == [manifest["metadata"]["name"]]


def test_a_few_failed_status_reads_are_waited_out(kube, trainjob):
    server, api = kube
    server.failing_reads = GET_FAILURES - 1
    _controller(server, "Complete")
    assert launch(api, trainjob(), startup_timeout_s=600, poll_s=0.02) == 0


def test_an_api_server_that_stays_away_fails_the_launch_and_deletes_the_trainjob(kube, trainjob):
    server, api = kube
    server.failing_reads = GET_FAILURES
    manifest = trainjob()
    with pytest.raises(KubeError, match="HTTP 503"):
        launch(api, manifest, startup_timeout_s=600, poll_s=0.02)
    assert server.deleted == [manifest["metadata"]["name"]]  # the retry's new TrainJob will not train beside it


def test_an_unreachable_api_server_exits_1(capsys):
    api = KubeAPI("http://127.0.0.1:9")  # the discard port: nothing listens
    assert main_trainjob("sft", SFT_2_NODES, api=api, poll_s=0.02) == 1
    assert "Connection refused" in capsys.readouterr().err


def test_trainjob_refuses_a_one_node_stage(kube, capsys):
    _, api = kube
    assert main_trainjob("sft", ["experiment=parallel_r1_seen"], api=api) == 2
    assert "puts it on one node" in capsys.readouterr().err

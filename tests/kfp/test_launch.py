"""`parathink kfp trainjob` where no API server is needed: what it refuses, and an API server that is not there.
Its life with a real API server (create, wait, delete) is in test_kube_apiserver.py."""

from __future__ import annotations

from kfp_helpers import SFT_2_NODES

from parathink.kfp.launch import KubeAPI, main_trainjob


def test_an_unreachable_api_server_exits_1(capsys):
    api = KubeAPI("http://127.0.0.1:9")  # the discard port: nothing listens
    assert main_trainjob("sft", SFT_2_NODES, api=api, poll_s=0.02) == 1
    assert "Connection refused" in capsys.readouterr().err


def test_trainjob_refuses_a_one_node_stage(capsys):
    assert main_trainjob("sft", ["experiment=parallel_r1_seen"], api=KubeAPI("http://127.0.0.1:9")) == 2
    assert "puts it on one node" in capsys.readouterr().err


def test_trainjob_outside_a_cluster_is_a_config_error(capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main_trainjob("sft", SFT_2_NODES) == 2
    assert "no in-cluster service account" in capsys.readouterr().err

"""`parathink kfp submit`: kfp.Client against a local server that speaks the KFP v2beta1 REST calls it makes
(tests/kfp/kfp_api.py says why not the real API server)."""

from __future__ import annotations

import re

import pytest
import yaml
from kfp_api import KfpApiServer
from kfp_helpers import CHEAP

from parathink.cli import main

S3_RUN = "run_dir=s3://bucket/runs/a"


def _submit(api: KfpApiServer, *args: str) -> int:
    return main(["kfp", "submit", "--host", api.url, "--poll", "0.05", *args])


def test_submit_creates_the_run_in_the_experiment_with_caching_off(tmp_path):
    compiled = tmp_path / "pipeline.yaml"
    assert main(["kfp", "compile", *CHEAP, S3_RUN, "seed=7", "--output", str(compiled)]) == 0
    with KfpApiServer() as api:
        assert _submit(api, *CHEAP, S3_RUN, "seed=7") == 0
    assert [m for m, _ in api.calls].count("GET") == 2  # healthz and the experiment lookup: no wait
    (experiment,) = api.experiments
    (run,) = api.runs.values()
    assert experiment["display_name"] == "tiny"  # experiment_name
    assert run["experiment_id"] == experiment["experiment_id"]
    assert re.fullmatch(r"tiny seed=7 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", run["display_name"])
    assert run["service_account"] == "parathink-runner"
    assert run["runtime_config"]["parameters"] == {"run_dir": "s3://bucket/runs/a"}
    spec = yaml.safe_load_all(compiled.read_text())
    sent = run["pipeline_spec"]
    assert sent["pipeline_spec"]["root"]["dag"]["tasks"].keys() == next(spec)["root"]["dag"]["tasks"].keys()
    assert sent["platform_spec"] == next(spec)  # node selectors, tolerations, secrets, /dev/shm reach the server
    for task in sent["pipeline_spec"]["root"]["dag"]["tasks"].values():
        assert task["cachingOptions"] == {}  # enableCache false (protobuf's JSON leaves out a false field)


@pytest.mark.parametrize("state, code", [("SUCCEEDED", 0), ("FAILED", 1)])
def test_wait_exits_with_the_run_outcome(state, code, capsys):
    with KfpApiServer(final_state=state, failed_task="filter" if code else None) as api:
        assert _submit(api, "--wait", *CHEAP, S3_RUN) == code
    assert api.calls[-1][0] == "GET" and api.calls[-1][1].startswith("/apis/v2beta1/runs/")
    if code:
        assert re.search(r"KFP run \S+ ended FAILED at filter", capsys.readouterr().err)


def test_a_run_dir_on_one_machine_is_refused_before_submitting(capsys):
    with KfpApiServer() as api:
        assert _submit(api, *CHEAP) == 2  # the local profile's runs/tiny: pods share no disk
    assert api.calls == []
    assert "run_dir: 'runs/tiny' is a folder on one machine" in capsys.readouterr().err


def test_bad_override_is_refused_before_submitting(capsys):
    with KfpApiServer() as api:
        assert _submit(api, *CHEAP, S3_RUN, "filter.gate.nope=1") == 2
    assert api.calls == []
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_unreachable_endpoint_is_one_line_and_exit_1(capsys):
    assert main(["kfp", "submit", "--host", "http://127.0.0.1:9", *CHEAP, S3_RUN]) == 1  # the discard port
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parathink: error: KFP endpoint http://127.0.0.1:9: ")


def test_namespace_and_token_file_are_sent_and_a_named_run_is_submitted_once(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("sa-token-1\n")
    auth = ["--namespace", "team-a", "--token-file", str(token), "--run-name", "parathink_nightly 2026-12-03"]
    with KfpApiServer(final_state="RUNNING") as api:
        assert _submit(api, *auth, *CHEAP, S3_RUN) == 0
        assert _submit(api, *auth, *CHEAP, S3_RUN) == 0  # an orchestrator's retry: the run is there already
        assert main(["kfp", "status", "--host", api.url, *auth]) == 75  # still going
        api.final_state = "FAILED"
        assert main(["kfp", "status", "--host", api.url, *auth]) == 1
        api.final_state = "SUCCEEDED"
        assert main(["kfp", "status", "--host", api.url, *auth]) == 0
        with_token = list(api.authorizations)
        assert main(["kfp", "status", "--host", api.url, "--run-name", "other"]) == 2
    (run,) = api.runs.values()
    assert run["display_name"] == "parathink_nightly 2026-12-03"
    assert set(with_token) == {"Bearer sa-token-1"}  # every call made with --token-file carries it
    assert "not submitted again" in capsys.readouterr().err

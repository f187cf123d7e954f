"""Secrets in config values never reach a manifest, run.json, MLflow params or the JSONL tracker (issue 21)."""

import json

import pytest
from mlflow.tracking import MlflowClient
from servers import sqlite_store

from parathink.pipeline import runner
from parathink.redact import REDACTED, redact, redact_text

PASSWORD, API_KEY, ENV_HOST = "hunter2-pw", "sk-live-123456", "internal-host.example"


def test_redact_hides_userinfo_and_secret_keys_but_not_their_lookalikes():
    cfg = {"base_url": "http://alice:pw@host:8000/v1", "api_key": "k", "extra_body": {"auth_token": "t"},
           "db_password": "p", "client_secret": "s", "api_key_env": "OPENAI_API_KEY", "token_budget": 288,
           "max_new_tokens": 96, "num_key_value_heads": 2, "tokenizer": {"vocab_size": 8}, "items": [{"token": "x"}]}
    out = redact(cfg)
    assert out["base_url"] == f"http://{REDACTED}@host:8000/v1"
    assert out["api_key"] == out["extra_body"]["auth_token"] == out["db_password"] == out["client_secret"] == REDACTED
    assert out["items"][0]["token"] == REDACTED
    assert {k: out[k] for k in ("api_key_env", "token_budget", "max_new_tokens", "num_key_value_heads",
                                "tokenizer")} == {k: cfg[k] for k in ("api_key_env", "token_budget",
                                                                      "max_new_tokens", "num_key_value_heads",
                                                                      "tokenizer")}
    assert redact_text("cannot reach https://u:secret@h/x (refused)") == f"cannot reach https://{REDACTED}@h/x (refused)"


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
def test_secrets_in_config_values_are_never_recorded(tmp_path, monkeypatch, backend):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("TEACHER_HOST", ENV_HOST)
    uri = sqlite_store(tmp_path / "mlflow.db")
    run = tmp_path / "run"
    over = [f"run_dir={run}", f"tracking={backend}", f"tracking.uri={uri}", "stages=[teacher]",
            "teacher.backend=scripted", "teacher.problems=[{source:synthetic,level:easy,split:train,n:4}]",
            f"teacher.openai.base_url=http://bob:{PASSWORD}@" + "${oc.env:TEACHER_HOST}:8000/v1",
            f"+teacher.openai.extra_body.api_key={API_KEY}"]
    assert runner.main_run(over) == 0
    recorded = [p.read_text() for p in run.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")]
    if backend == "sqlite":
        client = MlflowClient(tracking_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name("parathink-tiny").experiment_id])
        assert len(runs) == 2
        recorded += [json.dumps(r.data.params) for r in runs]
        assert any("teacher.openai.base_url" in r.data.params for r in runs)
    blob = "\n".join(recorded)
    assert "teacher" in blob and "${oc.env:TEACHER_HOST}" in blob  # recorded as written, not as resolved
    for secret in (PASSWORD, API_KEY, ENV_HOST):
        assert secret not in blob

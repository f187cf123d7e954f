"""What a stage read shows in MLflow as dataset inputs, with the digest the rerun decision used."""

import json

from mlflow.tracking import MlflowClient
from servers import sqlite_store

from parathink.pipeline import runner
from parathink.rundir.manifest import Manifest
from parathink.tracking.datasets import stage_datasets


def test_records_name_earlier_stages_and_outside_files(tmp_path):
    data = tmp_path / "snap" / "2026-12-03.jsonl"
    data.parent.mkdir()
    data.write_text('{"a": 1}\n{"a": 2}\n\n')
    m = Manifest(stage="sft", config_hash="h", config={}, inputs={"filter": "0123456789abcdef0123", "base": None},
                 external={str(data): {"": {"sha256": "x", "size": 17}}})
    got = stage_datasets(m, "s3://bucket/runs/a/")
    assert got[0] == {"name": "filter output", "source": "s3://bucket/runs/a/filter", "source_type": "s3",
                      "digest": "0123456789abcdef"}  # an absent input (None) is no dataset
    assert got[1]["name"] == "2026-12-03.jsonl" and got[1]["rows"] == 2 and got[1]["bytes"] == 17
    other = Manifest(stage="sft", config_hash="h", config={}, inputs={},
                     external={str(data): {"": {"sha256": "y", "size": 17}}})
    assert stage_datasets(other, "r")[0]["digest"] != got[1]["digest"]  # another snapshot, another digest
    assert len(got) == 2


def test_a_new_snapshot_reruns_the_stage_and_mlflow_shows_each_digest(tmp_path, monkeypatch):
    """The real filter stage on an outside JSON-lines file, tracked into a sqlite MLflow store; the file is then
    replaced by a smaller snapshot: the stage reruns, and each run's dataset input carries its own digest. Between the
two, the unchanged snapshot is up to date: the stage is skipped."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    raw = tmp_path / "raw.jsonl"
    rows = [{"id": f"p{i}", "problem": f"q{i}", "answer": "1", "response": "so \\boxed{1}"} for i in range(20)]
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    uri = sqlite_store(tmp_path / "mlflow.db")
    over = [f"run_dir={tmp_path / 'run'}", "tracking=sqlite", f"tracking.uri={uri}", f"filter.input={raw}",
            "filter.gate.enabled=false", "tracking.register_models=false"]
    assert runner.main_stage("filter", over) == 0
    manifest = (tmp_path / "run" / "filter" / "_manifest.json").read_text()
    assert runner.main_stage("filter", over) == 0  # the same snapshot: up to date, skipped (no second run below)
    assert (tmp_path / "run" / "filter" / "_manifest.json").read_text() == manifest
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows[:5]))
    assert runner.main_stage("filter", over) == 0
    assert json.loads((tmp_path / "run" / "filter" / "_manifest.json").read_text())["external"] != \
        json.loads(manifest)["external"]  # the manifest records the new snapshot's fingerprint
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.`parathink.stage` = 'filter'", order_by=["attributes.start_time"])
    inputs = [[d.dataset for d in r.inputs.dataset_inputs] for r in runs]
    assert [[(d.name, json.loads(d.source)["uri"], json.loads(d.profile)["rows"]) for d in i] for i in inputs] == [
        [("raw.jsonl", str(raw), 20)], [("raw.jsonl", str(raw), 5)]]
    assert inputs[0][0].digest != inputs[1][0].digest

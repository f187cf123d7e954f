"""MLflow tracking of a curriculum run: parent and nested runs, params, metrics, registry, plots, promote."""

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from parathink.pipeline import commands, runner
from parathink.tracking import registry


def overrides(c, *extra):
    return c.overrides(f"tracking.uri={c.uri}", *extra, stages=("prep", "train", "tune", "eval"))


def _runs(client, exp_id):
    runs = client.search_runs([exp_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.data.tags["parathink.stage"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    return parent, children


def test_run_is_tracked_registered_and_plotted(curriculum):
    assert runner.main_run(overrides(curriculum)) == 0
    client = MlflowClient(tracking_uri=curriculum.uri)
    exp = client.get_experiment_by_name("parathink-tiny")
    parent, children = _runs(client, exp.experiment_id)
    assert len(parent) == 1 and set(children) == {"prep", "train", "tune", "eval"}
    p = parent[0]
    assert p.info.status == "FINISHED" and all(c.info.status == "FINISHED" for c in children.values())
    assert all(c.data.tags["mlflow.parentRunId"] == p.info.run_id for c in children.values())
    assert p.data.params["train.steps"] == "4" and p.data.params["seed"] == "0"  # the whole config
    assert children["train"].data.params["stage.steps"] == "4"  # the stage's own section
    history = client.get_metric_history(children["train"].info.run_id, "loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]
    assert children["tune"].data.metrics["total"] == 6.0
    # eval results land on the eval run and the parent
    assert p.data.metrics["tune.hard.accuracy"] == 0.19
    # models: one version per model stage, tagged with its eval scores; the best is the candidate
    versions = {v.tags["stage"]: v for v in client.search_model_versions("name='parathink-tiny'")}
    assert set(versions) == {"train", "tune"}
    assert versions["tune"].tags["eval.hard.accuracy"] == "0.19"
    assert client.get_model_version_by_alias("parathink-tiny", "candidate").version == versions["tune"].version
    arts = {a.path for a in client.list_artifacts(children["train"].info.run_id)}
    assert {"model", "_manifest.json", "metrics.jsonl"} <= arts
    plots = {a.path for a in client.list_artifacts(p.info.run_id, "plots")}
    assert plots == {"plots/figure3_rl_curves.png", "plots/results_table.png"}
    local = client.download_artifacts(p.info.run_id, "plots/figure3_rl_curves.png", str(curriculum.tmp))
    assert Path(local).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the run's report card: in the run directory and on the parent run, the same text
    report = (Path(curriculum.run_dir) / "report.md").read_text()
    assert "| train | ran |" in report and "![figure3_rl_curves](report/figure3_rl_curves.png)" in report
    logged = client.download_artifacts(p.info.run_id, "report.md", str(curriculum.tmp))
    assert Path(logged).read_text() == report
    # the run directory remembers the parent run: a second invocation reuses it and reruns nothing
    meta = json.loads((Path(curriculum.run_dir) / "run.json").read_text())
    assert meta["mlflow"]["parent_run_id"] == p.info.run_id
    assert runner.main_run(overrides(curriculum)) == 0
    parent2, _ = _runs(client, exp.experiment_id)
    assert [r.info.run_id for r in parent2] == [p.info.run_id]
    assert curriculum.ran() == ["prep", "train", "tune", "eval"]


def test_promote_moves_champion_only_on_a_win(curriculum, capsys):
    assert runner.main_run(overrides(curriculum)) == 0
    client = MlflowClient(tracking_uri=curriculum.uri)
    base = [f"tracking.uri={curriculum.uri}"]
    assert commands.main_promote(base) == 0
    assert "no champion yet" in capsys.readouterr().out
    champion = client.get_model_version_by_alias("parathink-tiny", "champion")
    assert champion.tags["stage"] == "tune"
    train_v = [v for v in client.search_model_versions("name='parathink-tiny'") if v.tags["stage"] == "train"][0]
    assert commands.main_promote(base + [f"tracking.promote.candidate={train_v.version}"]) == 0
    out = capsys.readouterr().out
    assert "kept champion" in out and "0.1300 does not beat the champion's 0.1900" in out
    assert client.get_model_version_by_alias("parathink-tiny", "champion").version == champion.version
    assert commands.main_promote(base) == 0
    assert "already the champion" in capsys.readouterr().out


def test_promotion_rule():
    assert registry.decide(0.30, None, 0.0)[0]
    assert registry.decide(0.30, 0.25, 0.01)[0]
    assert not registry.decide(0.26, 0.25, 0.01)[0]  # a win inside the margin is not a win
    assert not registry.decide(0.25, 0.25, 0.0)[0]
    assert not registry.decide(None, 0.25, 0.0)[0]


def test_compare_prints_both_runs(curriculum, capsys):
    assert runner.main_run(overrides(curriculum)) == 0
    other = Path(curriculum.tmp) / "run2"
    curriculum.run_dir = str(other)
    assert runner.main_run(overrides(curriculum, "tune.steps=5")) == 0
    capsys.readouterr()
    assert commands.main_compare([str(Path(curriculum.tmp) / "run"), str(other)]) == 0
    out = capsys.readouterr().out
    assert "tune" in out and "19.0 | 28.0" in out  # hard mean@k of tune: 0.19 vs 0.28
    assert commands.main_compare([str(other), str(Path(curriculum.tmp) / "nowhere")]) == 2

"""`parathink stage promote`: the pipelines' last task moves `champion` only when this run's best model wins.

The plug-in stages' models are stand-ins (a config.json and random bytes) nothing can sample, so these tests compare
the scores stored on the versions (``tracking.promote.paired=false``); test_champion_challenger.py samples real
checkpoints side by side."""

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from parathink.pipeline import runner


def _run(c, run_dir: str, *extra: str) -> list[str]:
    c.run_dir = run_dir
    over = c.overrides(f"tracking.uri={c.uri}", "tracking.promote.paired=false", *extra,
                       stages=("prep", "train", "tune", "eval"))
    assert runner.main_run(over) == 0
    return over


def _champion(c):
    v = MlflowClient(tracking_uri=c.uri).get_model_version_by_alias("parathink-tiny", "champion")
    return v.version, v.tags["stage"], v.tags["eval.hard.accuracy"]


def test_promote_stage_moves_champion_on_a_win_only(curriculum, capsys):
    tmp = Path(curriculum.tmp)
    over = _run(curriculum, str(tmp / "a"))  # best model of run a: tune, hard 0.19
    assert runner.main_stage("promote", over) == 0
    assert "no champion yet" in capsys.readouterr().err
    first = _champion(curriculum)
    assert first[1:] == ("tune", "0.19")
    decision = json.loads((tmp / "a" / "promote" / "promotion.json").read_text())
    assert decision["promoted"] is True and decision["champion_before"] is None

    over = _run(curriculum, str(tmp / "b"), "tune.steps=5")  # run b's tune scores 0.28: a win
    assert runner.main_stage("promote", over) == 0
    err = capsys.readouterr().err
    assert "promoted" in err and "| hard.accuracy **(promotion metric)** | 0.28 | 0.19 |" in err
    assert _champion(curriculum)[2] == "0.28"

    over = _run(curriculum, str(tmp / "c"))  # 0.19 again: loses, champion stays
    assert runner.main_stage("promote", over + ["tracking.promote.margin=0.0"]) == 0
    assert "kept champion" in capsys.readouterr().err
    assert _champion(curriculum)[2] == "0.28"
    table = (tmp / "c" / "promote" / "comparison.md").read_text()
    assert "| hard.accuracy **(promotion metric)** | 0.19 | 0.28 |" in table


def test_promote_stage_refuses_failed_gates_and_missing_eval(curriculum, capsys):
    tmp = Path(curriculum.tmp)
    over = _run(curriculum, str(tmp / "a"))
    manifest = tmp / "a" / "tune" / "_manifest.json"
    data = json.loads(manifest.read_text())
    data["gates"] = {"passed": False, "expectations": []}
    manifest.write_text(json.dumps(data))
    assert runner.main_stage("promote", over) == 3
    assert "gates failed at tune" in capsys.readouterr().err
    client = MlflowClient(tracking_uri=curriculum.uri)
    assert not client.get_registered_model("parathink-tiny").aliases.get("champion")

    curriculum.run_dir = str(tmp / "empty")
    assert runner.main_stage("promote", curriculum.overrides(f"tracking.uri={curriculum.uri}")) == 2
    assert "needs outputs of 'eval'" in capsys.readouterr().err
    assert runner.main_stage("promote", curriculum.overrides("tracking=none")) == 2
    assert "needs the MLflow registry" in capsys.readouterr().err


def test_each_decision_is_on_its_version_and_a_rollback_restores_the_previous_champion(curriculum, capsys):
    from parathink.pipeline.commands import main_promote

    tmp = Path(curriculum.tmp)
    client = MlflowClient(tracking_uri=curriculum.uri)
    over = _run(curriculum, str(tmp / "a"))
    assert runner.main_stage("promote", over) == 0
    first = client.get_model_version_by_alias("parathink-tiny", "champion")
    assert first.tags["promotion.decision"] == "promoted" and first.tags["promotion.previous_champion"] == "none"
    assert main_promote([f"tracking.uri={curriculum.uri}", "--rollback", "parathink-tiny"]) == 2  # nothing before
    assert "replaced no earlier champion" in capsys.readouterr().err

    over = _run(curriculum, str(tmp / "b"), "tune.steps=5")  # a win
    assert runner.main_stage("promote", over) == 0
    second = client.get_model_version_by_alias("parathink-tiny", "champion")
    promote_run = json.loads((tmp / "b" / "promote" / "_manifest.json").read_text())["mlflow_run_id"]
    assert second.tags["promotion.previous_champion"] == str(first.version)
    assert second.tags["promotion.compared_with"] == f"v{first.version}"
    assert second.tags["promotion.decided_by_run"] == promote_run and "beats" in second.tags["promotion.why"]

    over = _run(curriculum, str(tmp / "c"))  # a loss: recorded on the loser, champion unchanged
    assert runner.main_stage("promote", over) == 0
    loser = json.loads((tmp / "c" / "promote" / "promotion.json").read_text())["candidate"]["version"]
    assert client.get_model_version("parathink-tiny", loser).tags["promotion.decision"] == "kept"

    capsys.readouterr()
    assert main_promote([f"tracking.uri={curriculum.uri}", "--rollback", "parathink-tiny",
                         "--why", "hard accuracy fell in serving"]) == 0
    assert f"from v{second.version} to v{first.version}" in capsys.readouterr().out
    assert str(client.get_model_version_by_alias("parathink-tiny", "champion").version) == str(first.version)
    rolled = client.get_model_version("parathink-tiny", second.version).tags
    assert rolled["promotion.decision"] == "rolled_back" and rolled["promotion.rolled_back_why"] == \
        "hard accuracy fell in serving"
    assert client.get_model_version("parathink-tiny", first.version).tags["promotion.restored_from"] == \
        str(second.version)

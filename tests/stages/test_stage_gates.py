"""The real stages' gates on the tiny model, through the runner: each passes on a good output and stops the run with
exit 3 on a crafted bad one, with nothing downstream started; a fix re-runs only what it must (docs/gates.md)."""

import json
from pathlib import Path

import pytest
import torch

from parathink.pipeline import runner
from parathink.rundir.manifest import MANIFEST

PARTIAL_EVAL = str(Path(__file__).with_name("partial_eval.py"))
# The base and sft gates share one probe (base.gate.probe interpolates sft.gate.probe): 8 problems x 2 samples here.
PROBE = ["sft.gate.probe.problems.n=8", "sft.gate.probe.k=2", "sft.gate.probe.max_new_tokens=96"]
DATA = ["teacher.backend=scripted", "data.cold_start.0.n=24", "data.cold_start.1.n=24", "teacher.gate.data_docs=false",
        "filter.gate.data_docs=false"]
EVAL = ["eval.sets.easy.n=4", "eval.sets.easy.k=2", "eval.sets.hard.n=4", "eval.sets.hard.k=2",
        "eval.sampling.max_new_tokens=64"]


def run(tmp_path, *overrides: str) -> int:
    return runner.main_run([f"run_dir={tmp_path / 'run'}", "tracking=none", *PROBE, *overrides])


def gates(tmp_path, stage) -> dict:
    return json.loads((tmp_path / "run" / stage / MANIFEST).read_text())["gates"]


def checks(tmp_path, stage) -> dict:
    return {e["name"]: e for e in gates(tmp_path, stage)["expectations"]}


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("CI", "true")
    torch.set_num_threads(2)


@pytest.mark.slow
def test_an_sft_that_has_not_learnt_the_format_stops_the_run_then_a_threshold_fix_lets_it_through(tmp_path, capsys):
    sft = ["sft.max_steps=2", "sft.global_batch=8", "sft.micro_batch=8", "sft.path_replay.n=0", "sft.vote_replay.n=0",
           "sft.max_minutes=0"]
    assert run(tmp_path, "stages=[base,teacher,filter,sft,rl_easy]", *DATA, *sft) == 3
    err = capsys.readouterr().err
    for good in ("base", "teacher", "filter"):  # the good outputs pass
        assert gates(tmp_path, good)["passed"] is True, gates(tmp_path, good)
    assert checks(tmp_path, "base")["probe_accuracy"]["observed"] >= 0.2
    got = checks(tmp_path, "sft")
    assert gates(tmp_path, "sft")["passed"] is False and got["probe_parallel_rate"]["passed"] is False
    assert got["steps"] == {**got["steps"], "observed": 2, "threshold": 2, "passed": True}
    assert "base" in got["probe_accuracy"]["note"] and "cached" in got["probe_accuracy"]["note"]  # the base gate's
    assert (tmp_path / "run" / "sft" / "model" / "config.json").exists()  # published for inspection
    assert not (tmp_path / "run" / "rl_easy").exists()  # nothing downstream started
    assert "[parathink] sft gate: FAILED" in err and "probe_parallel_rate" in err.splitlines()[-1]

    # The thresholds relaxed: the published model is judged again; nothing is trained again.
    relaxed = ["sft.gate.min_parallel_rate=0", "sft.gate.min_valid_rate=0", "sft.gate.max_accuracy_drop=null"]
    assert run(tmp_path, "stages=[base,teacher,filter,sft]", *DATA, *sft, *relaxed) == 0
    err = capsys.readouterr().err
    assert "sft: evaluating its gate on the published output (its gate settings changed)" in err
    assert ": running" not in err and gates(tmp_path, "sft")["passed"] is True


@pytest.mark.slow
def test_an_rl_stage_whose_loss_went_nonfinite_stops_the_run_and_a_fix_reruns_only_it_and_what_follows(
        tmp_path, capsys, monkeypatch):
    from parathink.training import rl

    calls, update = [], rl.update

    def nan_at_the_second_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise FloatingPointError("loss is not finite")  # what update raises on a NaN loss
        return update(*args, **kwargs)

    monkeypatch.setattr(rl, "update", nan_at_the_second_step)
    r = "rl_easy"
    over = ["stages=[base,rl_easy,eval]", f"{r}.init_from=base", f"{r}.reward=accuracy", f"{r}.steps=3",
            f"{r}.prompts_per_step=2", f"{r}.group_size=2", f"{r}.token_budget=100", f"{r}.problems.n=8",
            f"{r}.probe_prompts=4", f"{r}.max_minutes=0", f"{r}.gate.min_parallel_rate=null",
            "eval.models=[base,rl_easy]",
            *EVAL]
    assert run(tmp_path, *over) == 3
    assert checks(tmp_path, r)["nonfinite_steps"] == {**checks(tmp_path, r)["nonfinite_steps"], "observed": 1,
                                                      "passed": False}
    assert (tmp_path / "run" / r / "model" / "config.json").exists() and not (tmp_path / "run" / "eval").exists()
    assert "nonfinite_steps 1 > 0 (NaN loss or reward)" in capsys.readouterr().err.splitlines()[-1]

    monkeypatch.setattr(rl, "update", update)
    assert run(tmp_path, *over, f"{r}.lr=1e-5") == 0  # a config fix: rl_easy and eval run, base is kept
    err = capsys.readouterr().err
    assert "base: skipped (up to date)" in err and f"{r}: running (config changed)" in err
    assert gates(tmp_path, r)["passed"] is True and gates(tmp_path, "eval")["passed"] is True
    assert checks(tmp_path, "eval")["sets_complete"]["observed"] == 4


@pytest.mark.slow
def test_an_eval_with_a_missing_set_fails_its_gate(tmp_path, capsys):
    over = ["stages=[base,eval]", f"+stage_modules.eval={PARTIAL_EVAL}", "eval.models=[base]",
            "base.gate.enabled=false",
            *EVAL]
    assert run(tmp_path, *over) == 3
    got = checks(tmp_path, "eval")["sets_complete"]
    assert (got["observed"], got["threshold"], got["note"]) == (1, 2, "base/hard: missing")
    assert "base: quality gate disabled" in capsys.readouterr().err


def test_a_broken_base_checkpoint_stops_the_run_before_the_teacher(tmp_path):
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("model_stage", Path(__file__).with_name("model_stage.py"))
    untrained = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(untrained)
    untrained.run(None, SimpleNamespace(seed=0, out_dir=tmp_path / "broken"))  # a checkpoint's shape, none of the skill
    assert run(tmp_path, "stages=[base,teacher]", f"model.source={tmp_path / 'broken' / 'model'}", *DATA) == 3
    assert checks(tmp_path, "base")["probe_accuracy"]["passed"] is False
    assert not (tmp_path / "run" / "teacher").exists()

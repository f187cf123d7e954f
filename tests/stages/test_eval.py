"""The eval stage through the runner: every model stage present, results.json schema, per-problem files."""

import json
from pathlib import Path

import pytest

from parathink.pipeline import runner

MODEL_STAGE = str(Path(__file__).with_name("model_stage.py"))
SMALL = ["eval.sets.easy.n=5", "eval.sets.easy.k=2", "eval.sets.hard.n=3", "eval.sets.hard.k=3",
         "eval.sampling.max_new_tokens=12", "tracking=none"]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    return tmp_path / "run"


def test_eval_stage_scores_every_model_present(run_dir):
    ovr = [f"run_dir={run_dir}", f"+stage_modules.base={MODEL_STAGE}", f"+stage_modules.sft={MODEL_STAGE}",
           "stages=[base,sft,eval]", *SMALL]
    assert runner.main_run(ovr) == 0
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    assert set(results["stages"]) == {"base", "sft"}
    assert results["missing"] == ["rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"]
    row = results["stages"]["sft"]["hard"]
    assert row["n"] == 9 and row["n_problems"] == 3 and row["k"] == 3
    for key in ("accuracy", "pass_at_k", "best_at_k", "maj_at_k", "parallel_rate", "blocks_per_trace",
                "response_length"):
        assert 0 <= row[key] <= (1 if key not in ("blocks_per_trace", "response_length") else 1e9), key
    assert "relative_position" in row and row["generator"] == "engine:structured"
    lines = (run_dir / "eval" / "base" / "easy.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == 5 and len(first["samples"]) == 2
    assert {"response", "extracted", "correct", "valid", "parallel", "errors", "blocks", "relative_position",
            "length"} <= set(first["samples"][0])
    # sft against its start (base) on the same problems: the paired difference, recomputed from the files.
    for set_name in ("easy", "hard"):
        acc = {st: {p["id"]: p["accuracy"] for p in map(json.loads, (run_dir / "eval" / st / f"{set_name}.jsonl").read_text().splitlines())}
               for st in ("base", "sft")}
        diffs = [acc["sft"][i] - acc["base"][i] for i in acc["base"]]
        got = results["vs_start"]["sft"][set_name]
        assert got["start"] == "base" and got["n_problems"] == len(diffs)
        assert got["delta"] == pytest.approx(sum(diffs) / len(diffs)) and got["se"] >= 0
    assert "base" not in results["vs_start"]
    manifest = json.loads((run_dir / "eval" / "_manifest.json").read_text())
    assert set(manifest["inputs"]) == {"base", "sft", "rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"}
    assert manifest["inputs"]["rl_easy"] is None  # absent, recorded: its arrival makes eval rerun


def _first_eval_attempt(run_dir):
    """(cfg, ctx, metrics) of an eval of `base` whose scratch (``run_dir/work``) a second attempt can reuse."""
    from parathink.stages import eval as eval_stage
    from parathink.stages.context import StageContext

    assert runner.main_run([f"run_dir={run_dir}", f"+stage_modules.base={MODEL_STAGE}", "stages=[base]",
                            *SMALL]) == 0
    cfg = runner.compose([f"run_dir={run_dir}", "eval.models=[base]", *SMALL])
    ctx = StageContext(name="eval", out_dir=run_dir / "out1", work_dir=run_dir / "work", seed=0,
                       resolve_input=lambda s: run_dir / s)
    ctx.out_dir.mkdir()
    return cfg, ctx, eval_stage.run(cfg, ctx)


def test_eval_reuses_finished_sets_after_a_kill(run_dir, monkeypatch):
    from parathink.stages import eval as eval_stage

    cfg, ctx, first = _first_eval_attempt(run_dir)
    # a second attempt with the same work_dir must not sample again
    import parathink.evaluation.generators as gen

    monkeypatch.setattr(gen, "engine_generator", lambda *a, **k: pytest.fail("sampled again"))
    ctx.out_dir = run_dir / "out2"
    ctx.out_dir.mkdir()
    assert eval_stage.run(cfg, ctx) == first
    assert (run_dir / "out2" / "base" / "hard.jsonl").read_bytes() == (run_dir / "out1" / "base" / "hard.jsonl").read_bytes()


def test_a_damaged_summary_in_the_scratch_is_evaluated_again(run_dir, capsys):
    from parathink.stages import eval as eval_stage

    cfg, ctx, first = _first_eval_attempt(run_dir)
    summary = run_dir / "work" / "base" / "hard.summary.json"
    summary.write_text("{damaged")
    ctx.out_dir = run_dir / "out2"
    ctx.out_dir.mkdir()
    assert eval_stage.run(cfg, ctx) == first
    assert str(summary) in capsys.readouterr().err


@pytest.mark.parametrize("override, key", [("eval.sets.easy.k=0", "eval.sets.easy.k"),
                                           ("eval.mode=forked", "eval.mode"),
                                           ("eval.sampling.top_p=0", "eval.sampling")])
def test_eval_config_errors(tmp_path, capsys, override, key):
    assert runner.main_stage("eval", [f"run_dir={tmp_path}", "tracking=none", override]) == 2
    assert key in capsys.readouterr().err


def test_eval_under_torchrun_splits_each_set_over_the_processes(run_dir, tmp_path, torchrun):
    """Two real processes: each samples every other problem, rank 0 writes the whole set in its order (the
    same problem ids, in the same order, as a one-process eval of the same run) and the summary over all."""
    ovr = [f"+stage_modules.base={MODEL_STAGE}", "stages=[base,eval]", "eval.models=[base]", *SMALL]
    proc = torchrun("-m", "parathink.cli", "run", f"run_dir={run_dir}", *ovr, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eval: running on 2 processes" in proc.stderr
    one = tmp_path / "one"
    assert runner.main_run([f"run_dir={one}", *ovr]) == 0
    for set_name, n, k in (("easy", 5, 2), ("hard", 3, 3)):
        two_rows = [json.loads(x) for x in (run_dir / "eval" / "base" / f"{set_name}.jsonl").read_text().splitlines()]
        one_rows = [json.loads(x) for x in (one / "eval" / "base" / f"{set_name}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in two_rows] == [r["id"] for r in one_rows] and len(two_rows) == n
        assert all(len(r["samples"]) == k for r in two_rows)
        row = json.loads((run_dir / "eval" / "results.json").read_text())["stages"]["base"][set_name]
        assert row["n_problems"] == n and row["n"] == n * k
        assert row["accuracy"] == pytest.approx(sum(r["accuracy"] for r in two_rows) / n)

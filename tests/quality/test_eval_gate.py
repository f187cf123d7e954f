"""The eval gate on crafted results: complete results pass; a missing set, a short set, a NaN or a model of the run
left out fails, so promotion never compares half an eval."""

import json
import math

from parathink.pipeline.compose import compose
from parathink.quality.gate import GateInput
from parathink.stages.eval.gate import eval_gate

ROW = {"n": 1600, "n_problems": 200, "k": 8, "accuracy": 0.6, "pass_at_k": 0.9, "parallel_rate": 0.9,
       "valid_rate": 0.95, "relative_position": None}  # relative_position: None without parallel samples, allowed


def _gate(tmp_path, stages: dict):
    (tmp_path / "results.json").write_text(json.dumps({"stages": stages, "missing": []}))
    out = GateInput(stage="eval", folder=tmp_path, gate_dir=tmp_path / "_gates", metrics={}, output_hash="h",
                    seed=0, cache_dir=tmp_path, input_hash=lambda s: None, resolve_input=lambda s: tmp_path / s)
    cfg = compose(["experiment=tiny", f"run_dir={tmp_path}", "stages=[base,sft,eval]"])
    return {c.name: (c.observed, c.passed, c.note) for c in eval_gate(cfg, out)}


def test_complete_results_pass(tmp_path):
    got = _gate(tmp_path, {"base": {"easy": ROW, "hard": ROW}, "sft": {"easy": ROW, "hard": ROW}})
    assert got == {"models_evaluated": (2, True, ""), "run_models_missing": (0, True, ""),
                   "sets_complete": (4, True, ""), "nonfinite_figures": (0, True, "")}


def test_a_missing_or_short_set_fails(tmp_path):
    got = _gate(tmp_path, {"base": {"easy": ROW, "hard": ROW}, "sft": {"easy": {**ROW, "n": 800}}})
    assert got["sets_complete"] == (2, False, "sft/easy: 800 of 1600 samples; sft/hard: missing")


def test_a_nan_figure_fails(tmp_path):
    got = _gate(tmp_path, {"base": {"easy": ROW, "hard": {**ROW, "accuracy": math.nan}}, "sft": {"easy": ROW,
                                                                                              "hard": ROW}})
    assert got["nonfinite_figures"] == (1, False, "base/hard.accuracy")


def test_a_model_of_the_run_left_out_fails(tmp_path):
    got = _gate(tmp_path, {"base": {"easy": ROW, "hard": ROW}})
    assert got["run_models_missing"] == (1, False, "sft") and got["sets_complete"][1] is True

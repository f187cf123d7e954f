"""The RL stages' gate on crafted step logs: a healthy stage passes; a NaN step, a collapsed probe reward, a lost
format or a runaway KL fails with the observed figure."""

import json
import math

import pytest

from parathink.pipeline.compose import compose
from parathink.quality.gate import GateInput
from parathink.stages.rl.gate import rl_gate

PROBE = {"probe_n": 512.0, "probe_reward_start": 0.28, "probe_reward_end": 0.32}


def _rows(n=12, **overrides):
    return [{"step": i, "loss": 0.1, "kl": None, "parallel_rate": 0.95, "skipped_nan": 0.0, "reward_mean": 0.3,
             **overrides} for i in range(1, n + 1)]


def _gate(tmp_path, stage, rows, metrics=PROBE, *overrides, planned=None):
    """The gate's checks of ``rows``; the stage configured for ``planned`` steps (default: as many as logged)."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = GateInput(stage=stage, folder=tmp_path, gate_dir=tmp_path / "_gates", metrics=dict(metrics),
                    output_hash="h", seed=0, cache_dir=tmp_path / ".gates", input_hash=lambda s: None,
                    resolve_input=lambda s: tmp_path / s)
    steps = f"{stage}.steps={planned or len(rows)}"
    checks = rl_gate(compose(["experiment=tiny", f"run_dir={tmp_path}", steps, *overrides]), stage, out)
    return {c.name: (c.observed, c.passed) for c in checks}


def test_a_healthy_stage_passes(tmp_path):
    got = _gate(tmp_path, "rl_easy", _rows())
    assert got == {"steps": (12, True), "nonfinite_steps": (0, True), "probe_reward_end": (0.32, True),
                   "probe_reward_end_vs_start": (0.32, True), "parallel_rate": (pytest.approx(0.95), True),
                   "kl": (None, None)}  # kl_coef=0: no reference model, nothing to bound


def test_a_stage_cut_short_by_the_safety_stop_fails(tmp_path):
    """A stage is its configured steps: fewer (max_minutes stopped it on a loaded host) fail the gate."""
    assert _gate(tmp_path, "grpo_baseline", _rows(26), planned=100)["steps"] == (26, False)
    assert _gate(tmp_path, "grpo_baseline", _rows(100), planned=100)["steps"] == (100, True)


def test_a_nan_loss_or_a_skipped_step_fails(tmp_path):
    rows = _rows()
    rows[3]["loss"] = None  # training.rl writes a NaN loss as null
    rows[7] = {**rows[7], "skipped_nan": 1.0}
    del rows[7]["loss"]
    assert _gate(tmp_path, "rl_hard", rows)["nonfinite_steps"] == (2, False)


def test_a_collapsed_probe_reward_fails(tmp_path):
    stuck = _gate(tmp_path, "rl_hard", _rows(), {"probe_n": 512.0, "probe_reward_start": -1.0,
                                                 "probe_reward_end": -1.0})
    assert stuck["probe_reward_end"] == (-1.0, False) and stuck["probe_reward_end_vs_start"] == (-1.0, True)
    fell = _gate(tmp_path, "rl_hard", _rows(), {"probe_n": 512.0, "probe_reward_start": 0.3, "probe_reward_end": 0.0})
    assert fell["probe_reward_end"] == (0.0, True) and fell["probe_reward_end_vs_start"] == (0.0, False)


def test_without_a_probe_the_training_reward_stands_in(tmp_path):
    got = _gate(tmp_path, "rl_hard", _rows(), {"reward_first": -0.5, "reward_last": math.nan})
    assert got["train_reward_last"] == (pytest.approx(math.nan, nan_ok=True), False)


def test_the_parallel_floor_holds_where_the_reward_asks_for_the_format(tmp_path):
    lost = _rows(parallel_rate=0.014)
    assert _gate(tmp_path, "rl_easy", lost)["parallel_rate"] == (pytest.approx(0.014), False)
    assert _gate(tmp_path, "rl_hard", lost)["parallel_rate"] == (None, None)  # accuracy reward: no floor
    # rl_scaffold: the floor covers the scaffold phase (steps <= scaffold_steps), not the accuracy steps after it.
    phased = [dict(r, parallel_rate=0.9 if r["step"] <= 30 else 0.1) for r in _rows(40)]
    assert _gate(tmp_path, "rl_scaffold", phased)["parallel_rate"] == (pytest.approx(0.9), True)
    assert _gate(tmp_path, "rl_scaffold", phased, PROBE, "rl_scaffold.scaffold_steps=40")["parallel_rate"][1] is False


def test_the_kl_bound_applies_with_a_reference_model(tmp_path):
    rows = _rows(kl=0.9)
    assert _gate(tmp_path, "rl_hard", rows, PROBE, "rl_hard.kl_coef=0.05")["kl"] == (pytest.approx(0.9), False)
    assert _gate(tmp_path, "rl_hard", _rows(kl=0.01), PROBE, "rl_hard.kl_coef=0.05")["kl"][1] is True

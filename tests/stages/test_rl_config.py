"""Every GRPO-family stage's config composes, validates, and refuses bad values with the key named."""

from pathlib import Path

import pytest

from parathink.errors import ConfigError
from parathink.pipeline.compose import compose
from parathink.pipeline.runner import main_stage, stage_module
from parathink.stages.rl import rl_config, rl_hard

CONF = str(Path(__file__).resolve().parents[2] / "hydra_conf")
STAGES = ["rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"]


def _cfg(overrides=()):
    return compose(list(overrides))


@pytest.mark.parametrize("stage", STAGES)
def test_default_config_validates(stage):
    cfg = _cfg()
    stage_module(cfg, stage).validate(cfg)


def test_schedules_and_modes_per_stage():
    cfg = _cfg()
    got = {s: (rl_config(cfg, s).reward, rl_config(cfg, s).init_from, rl_config(cfg, s).mode) for s in STAGES}
    assert got["rl_easy"][:2] == ("parallel_x_accuracy", "sft")
    assert got["rl_hard"][:2] == ("accuracy", "rl_easy")
    assert got["rl_scaffold"][:2] == ("scaffold", "rl_easy")
    assert got["grpo_baseline"] == ("accuracy", "base", "causal")


@pytest.mark.parametrize("override, key", [
    ("rl_hard.advantage=gae", "rl_hard.advantage"),
    ("rl_hard.policy_loss=ppo2", "rl_hard.policy_loss"),
    ("rl_hard.loss_agg=mean", "rl_hard.loss_agg"),
    ("rl_hard.reward=format_only", "rl_hard.reward"),
    ("rl_hard.group_size=1", "rl_hard.group_size"),
    ("rl_hard.token_budget=0", "rl_hard.token_budget"),
    ("rl_hard.mode=tree", "rl_hard.mode"),
    ("rl_hard.temperature=0", "rl_hard.temperature"),
    ("rl_easy.problems.level=medium", "rl_easy.problems.level"),
    ("rl_hard.problems.split=test", "rl_hard.problems.split"),
    ("rl_hard.old_logprobs=vllm", "rl_hard.old_logprobs"),
    ("rl_hard.rollout.backend=sglang", "rl_hard.rollout.backend"),
])
def test_bad_values_fail_in_validate_naming_the_key(override, key):
    stage = key.split(".")[0]
    cfg = _cfg([override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        stage_module(cfg, stage).validate(cfg)


@pytest.mark.parametrize("override, words", [
    ("rl_hard.stepz=3", ["unknown config key 'rl_hard.stepz'"]),
    ("rl_hard.steps=many", ["rl_hard.steps: must be an integer", "'many'"]),
])
def test_a_misspelt_key_or_a_wrong_type_fails_while_composing(override, words, capsys):
    """The stage's schema (RLConfig) is checked by Hydra itself: one line naming the key, exit 2."""
    assert main_stage("rl_hard", ["tracking=none", override]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and all(w in line for w in words), line


def test_plan_refuses_vllm_rollouts_for_a_structured_stage_in_one_line(capsys):
    """vLLM samples one causal stream: a structured experiment's rl_hard (path-private attention, restarted
    positions) cannot take it; `parathink plan` says so before anything runs, exit 2."""
    from parathink.cli import main

    assert main(["plan", "experiment=parallel_r1_unseen_s1", "rl_hard.rollout.backend=vllm"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("parathink: error: rl_hard.rollout.backend=vllm: rl_hard.mode='structured' needs the "
                           "native engine"), line


@pytest.mark.parametrize("overrides, ok", [
    (["grpo_baseline.rollout.backend=vllm"], True),  # old_logprobs auto: recomputed
    (["grpo_baseline.rollout.backend=vllm", "grpo_baseline.old_logprobs=recompute"], True),
    (["grpo_baseline.rollout.backend=vllm", "grpo_baseline.old_logprobs=engine"], False),
    (["grpo_baseline.rollout.backend=vllm", "grpo_baseline.repetition_penalty_in_paths=1.02"], False),
])
def test_vllm_rollouts_recompute_the_old_log_probs(overrides, ok):
    cfg = _cfg(overrides)
    if ok:
        assert rl_config(cfg, "grpo_baseline").recompute_old_logprobs
    else:
        with pytest.raises(ConfigError, match=r"grpo_baseline\.rollout\.backend=vllm: "):
            rl_config(cfg, "grpo_baseline")
    assert not rl_config(_cfg(), "grpo_baseline").recompute_old_logprobs  # native, auto: the engine's own


def test_on_policy_loss_refuses_several_passes():
    with pytest.raises(ConfigError, match="rl_hard.updates_per_step"):
        rl_hard.validate(_cfg(["rl_hard.policy_loss=on_policy", "rl_hard.updates_per_step=2"]))


@pytest.mark.parametrize("name, text, why", [
    ("missing.json", None, "cannot read it"),
    ("broken.json", "{\"zero_optimization\": ", "not JSON"),
    ("zero4.json", "{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage=4, expected 0, 1, 2 or 3"),
])
def test_a_bad_deepspeed_file_fails_in_validate(tmp_path, name, text, why):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=rf"rl_hard\.deepspeed={path}: {why}"):
        rl_hard.validate(_cfg([f"rl_hard.deepspeed={path}"]))
    for fine in ("zero2.json", "zero3.json"):  # the shipped files pass
        rl_hard.validate(_cfg([f"rl_hard.deepspeed={Path(CONF) / 'deepspeed' / fine}"]))

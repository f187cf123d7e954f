"""The gates' threshold schemas (parathink.config.thresholds): one line naming the key, before any stage starts."""

import pytest
from omegaconf import OmegaConf

from parathink.config.thresholds import RLThresholds, SFTThresholds, check_thresholds
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose


@pytest.mark.parametrize("overrides, message", [
    (["sft.gate.min_valid_rate=1.5"], "sft.gate.min_valid_rate: must be a number in [0, 1], got 1.5"),
    (["+sft.gate.min_acuracy=0.5"], "unknown config key 'sft.gate.min_acuracy' (sft.gate takes: enabled, "
                                    "full_schedule, max_accuracy_drop, min_parallel_rate, min_valid_rate, probe)"),
    (["rl_hard.gate.window=0"], "rl_hard.gate.window: must be an integer >= 1, got 0"),
    (["rl_hard.gate.max_kl=-1"], "rl_hard.gate.max_kl: must be a number >= 0 or null, got -1.0"),
])
def test_a_built_in_stage_s_thresholds_fail_while_composing(overrides, message):
    """Their schema is the stage's gate field (parathink.pipeline.schema checks its bounds and keys too)."""
    with pytest.raises(ConfigError) as e:
        compose(overrides)
    assert str(e.value) == f"config: {message}"


@pytest.mark.parametrize("gate, message", [
    ({"min_valid_rate": 1.5}, "sft.gate.min_valid_rate: must be a number in [0, 1], got 1.5"),
    ({"max_accuracy_drop": None}, None),  # null switches that check off
    ({"min_acuracy": 0.5}, "sft.gate.min_acuracy: unknown threshold; known: enabled, full_schedule, "
                           "max_accuracy_drop, min_parallel_rate, min_valid_rate, probe"),
])
def test_sft_thresholds(gate, message):
    """check_thresholds on a section no schema typed (a plug-in stage's gate is checked this way)."""
    section = OmegaConf.to_container(compose([]).sft.gate, resolve=True)
    cfg = OmegaConf.create({"sft": {"gate": {**section, **gate}}})
    if message is None:
        assert check_thresholds(cfg, "sft", SFTThresholds)["max_accuracy_drop"] is None
        return
    with pytest.raises(ConfigError) as e:
        check_thresholds(cfg, "sft", SFTThresholds)
    assert str(e.value) == message


@pytest.mark.parametrize("gate, message", [
    ({"window": 0}, "rl_hard.gate.window: must be an integer >= 1, got 0"),
    ({"max_kl": -1}, "rl_hard.gate.max_kl: must be a number >= 0 or null, got -1"),
    ({"min_probe_reward": -5}, None),  # any number
])
def test_rl_thresholds(gate, message):
    section = OmegaConf.to_container(compose([]).rl_hard.gate, resolve=True)
    cfg = OmegaConf.create({"rl_hard": {"gate": {**section, **gate}}})
    if message is None:
        check_thresholds(cfg, "rl_hard", RLThresholds)
        return
    with pytest.raises(ConfigError, match=f"^{message}$".replace("[", r"\[")):
        check_thresholds(cfg, "rl_hard", RLThresholds)
    compose(["rl_hard.gate.min_probe_reward=-5"])  # composes too


@pytest.mark.parametrize("override, key", [("teacher.gate.min_valid_rate=lots", "teacher.gate.min_valid_rate"),
                                           ("filter.gate.min_acepted=1", "filter.gate.min_acepted"),
                                           ("eval.gate.min_models=one", "eval.gate.min_models"),
                                           # sft, rl and base type their gate too (training/*_config.py)
                                           ("sft.gate.full_schedule=sometimes", "sft.gate.full_schedule"),
                                           ("sft.gate.probe=3", "sft.gate.probe"),
                                           ("~sft.gate.min_valid_rate", "sft.gate.min_valid_rate"),
                                           ("rl_hard.gate.windw=3", "rl_hard.gate.windw"),
                                           ("base.gate.min_accuracy=most", "base.gate.min_accuracy")])
def test_typed_gate_sections_fail_while_composing(override, key):
    with pytest.raises(ConfigError, match=f"^config: .*{key}"):
        compose([override])

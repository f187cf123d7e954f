"""The stage contract (parathink.stages.contract): every built-in stage says what it gives the runner in STAGE."""

import types

import pytest

from parathink.config.thresholds import GateThresholds
from parathink.errors import ConfigError
from parathink.pipeline.runner import compose, stage_module
from parathink.stages import CURRICULUM
from parathink.stages.contract import Gate, StageSpec, spec_of


def test_every_builtin_stage_is_a_stage_spec():
    cfg = compose([])
    specs = {name: stage_module(cfg, name) for name in CURRICULUM}
    assert all(isinstance(s, StageSpec) and callable(s.run) for s in specs.values())
    assert {n for n, s in specs.items() if s.data_parallel} == {"sft", "rl_easy", "rl_hard", "rl_scaffold",
                                                               "grpo_baseline", "eval"}
    assert {n for n, s in specs.items() if s.gate is None} == {"promote"}
    assert specs["filter"].expand_overrides(["input=r.jsonl"]) == ["filter.input=r.jsonl"]
    assert specs["teacher"].shared_keys == ("data", "format", "seed", "model")


def test_plug_in_forms():
    def run(cfg, ctx):
        return {}

    spec = StageSpec(run=run, gate=Gate(lambda cfg, out: [], GateThresholds))
    assert spec_of(spec, "a", "m:a") is spec
    assert spec_of(types.SimpleNamespace(STAGE=spec, run=print), "a", "m") is spec
    assert spec_of(types.SimpleNamespace(run=run), "a", "m") == StageSpec(run=run)
    named = spec_of(types.SimpleNamespace(run=run, DATA_PARALLEL=True, SHARED_KEYS=["seed"]), "a", "m")
    assert named.data_parallel and named.shared_keys == ("seed",) and named.gate is None
    with pytest.raises(ConfigError, match=r"^stage 'a': m has no run\(cfg, ctx\) function and no STAGE$"):
        spec_of(types.SimpleNamespace(), "a", "m")
    with pytest.raises(ConfigError, match=r"^stage 'a': m defines gate but no STAGE; export STAGE = StageSpec"):
        spec_of(types.SimpleNamespace(run=run, gate=run), "a", "m")

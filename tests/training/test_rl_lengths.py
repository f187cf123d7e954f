"""The papers' lengths (issue 47 item 6): RL bounds the prompt and the response separately, as Parallel-R1's public
script does (max_prompt_length=2000, max_response_length=3000), within token_budget; the tiny curriculum keeps its
single budget."""

from __future__ import annotations

import pytest

from parathink.config.rl import RLConfig
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose
from parathink.stages.rl import rl_config

GPU_RL = {"parallel_r1_seen": ["rl_easy", "rl_hard"], "parallel_r1_unseen_s1": ["rl_hard"],
          "parallel_r1_unseen_s2": ["rl_hard"], "npr": ["rl_easy", "rl_hard"], "grpo_baseline": ["grpo_baseline"],
          "scaffold": ["rl_scaffold"]}


@pytest.mark.parametrize("experiment", sorted(GPU_RL))
def test_every_gpu_rl_stage_has_the_papers_lengths(experiment):
    cfg = compose([f"experiment={experiment}"])
    assert set(GPU_RL[experiment]) <= set(cfg.stages)
    for stage in GPU_RL[experiment]:
        s = rl_config(cfg, stage)
        assert (s.max_prompt_tokens, s.max_response_tokens, s.token_budget) == (2000, 3000, 5000), stage
        # a short prompt no longer hands its share to the response; a long one still fits the budget
        assert s.response_tokens(120) == 3000 and s.response_tokens(2000) == 3000


def test_parathinker_trains_no_rl_stage():
    """ParaThinker is SFT only: the lengths of the RL sections it inherits are never used."""
    cfg = compose(["experiment=parathinker"])
    assert not any(stage.startswith("rl") or stage == "grpo_baseline" for stage in cfg.stages)


def test_the_tiny_default_keeps_one_budget():
    cfg = compose([])
    for stage in ("rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"):
        s = rl_config(cfg, stage)
        assert (s.max_prompt_tokens, s.max_response_tokens) == (0, 0)
        assert s.response_tokens(40) == s.token_budget - 40  # what token_budget leaves, as before


def _cfg(**kw) -> dict:
    return {"problems": {"source": "synthetic", "level": "easy", "split": "train", "n": 8}, "token_budget": 500, **kw}


@pytest.mark.parametrize("kw,says", [
    ({"max_prompt_tokens": 500}, "t.max_prompt_tokens=500: must be below t.token_budget=500"),
    ({"max_response_tokens": 900}, "t.max_response_tokens=900: must be below t.token_budget=500"),
    ({"max_prompt_tokens": 200, "max_response_tokens": 400},
     "t.max_prompt_tokens=200 + t.max_response_tokens=400 = 600: more than t.token_budget=500"),
])
def test_lengths_that_do_not_fit_the_budget_are_one_line(kw, says):
    with pytest.raises(ConfigError) as err:
        RLConfig.from_cfg(_cfg(**kw), "t")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_negative_length_is_refused_at_compose():
    from parathink.pipeline import runner

    with pytest.raises(ConfigError, match="rl_hard.max_response_tokens"):
        cfg = compose(["experiment=parallel_r1_seen", "rl_hard.max_response_tokens=-1"])
        runner.validate(cfg, list(cfg.stages))


def test_the_response_takes_the_smaller_bound():
    s = RLConfig.from_cfg(_cfg(max_response_tokens=300), "t")
    assert s.response_tokens(100) == 300  # the response's own bound
    assert s.response_tokens(350) == 150  # what the budget leaves, when that is less


def test_a_prompt_over_its_bound_is_refused_before_any_rollout():
    """setup_problems names the setting and the problem (verl would cut the prompt from the left; we refuse)."""
    from parathink.modeling.tokenizer import train_tokenizer
    from parathink.training.rl import setup_problems

    tok = train_tokenizer(["What is 3 + 4? Answer: 7", "Compute 12 * 5 and give the answer."] * 20)
    cfg = RLConfig.from_cfg(_cfg(max_prompt_tokens=10, max_response_tokens=100), "t")
    with pytest.raises(ConfigError, match=r"t.max_prompt_tokens=10: smaller than the prompt of problem \S+ \(\d+ tok"):
        setup_problems(cfg, tok, seed=0, stage="t")
    roomy = RLConfig.from_cfg(_cfg(max_prompt_tokens=400, max_response_tokens=99), "t")
    assert len(setup_problems(roomy, tok, seed=0, stage="t")) == 8

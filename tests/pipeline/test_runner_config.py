"""Every experiment composes and passes every stage's validate() here (the real ones need GPUs to run)."""

import pytest

from parathink.pipeline import runner

EXPERIMENTS = ["tiny", "parallel_r1_seen", "parallel_r1_unseen_s1", "parallel_r1_unseen_s2", "scaffold",
               "grpo_baseline", "npr", "parathinker", "npr_tiny", "parathinker_tiny"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_validates(experiment):
    cfg = runner.compose([f"experiment={experiment}"])
    assert cfg.experiment_name == experiment
    runner.validate(cfg, [str(s) for s in cfg.stages])


def test_paper_settings_reach_the_stages():
    """docs/reference.md's Parallel-R1 hyperparameters, as the stages read them."""
    seen = runner.compose(["experiment=parallel_r1_seen"])
    assert (seen.rl_easy.prompts_per_step, seen.rl_easy.group_size, seen.rl_easy.lr) == (1024, 5, 1e-6)
    assert (seen.rl_hard.prompts_per_step, seen.rl_hard.group_size, seen.rl_hard.steps) == (512, 8, 300)
    assert seen.rl_hard.kl_coef == 0.0 and seen.eval.sets.aime25.k == 16 and seen.eval.sets.math.k == 1
    assert seen.eval.sampling.temperature == 1.0 and seen.model.source == "Qwen/Qwen3-4B-Base"
    s2 = runner.compose(["experiment=parallel_r1_unseen_s2"])
    assert (s2.rl_hard.reward, s2.rl_hard.mode, s2.rl_hard.eps_high, s2.rl_hard.init_from) == \
        ("alternating", "structured", 0.28, "sft")
    scaffold = runner.compose(["experiment=scaffold"])
    assert (scaffold.rl_scaffold.reward, scaffold.rl_scaffold.scaffold_steps) == ("scaffold", 200)
    assert "rl_easy" not in runner.compose(["experiment=parallel_r1_unseen_s1"]).stages


def test_overrides_beat_the_experiment():
    cfg = runner.compose(["experiment=parallel_r1_seen", "seed=7", "rl_hard.steps=3", "run_dir=s3://b/x"])
    assert (cfg.seed, cfg.rl_hard.steps, cfg.run_dir) == (7, 3, "s3://b/x")

"""What the RL loop tests share (test_rl_loop.py, test_rl_data_parallel.py and the scripts the latter launches under
torchrun): a reward a random model can improve, small configs, a tracker that "kills" the run at a step."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from parathink.stages.context import StageContext
from parathink.training.rl import RLConfig, train


def digit_share(trace, correct, step):
    """The share of digits in the response: a random model improves it in a few steps."""
    text = trace.text
    return sum(c.isdigit() for c in text) / max(1, len(text))


def nan_reward(trace, correct, step):
    return float("nan")


TEST_REWARDS = {"test_digits": digit_share, "test_nan": nan_reward}

# The start of a script torchrun launches: this module loaded from its path (argv[1]), one thread, the digit reward.
TORCHRUN_PREAMBLE = """
import importlib.util, sys, torch
from parathink import distributed
from parathink.rewards import register
distributed.group()
spec = importlib.util.spec_from_file_location("rl_helpers", sys.argv[1])
helpers = importlib.util.module_from_spec(spec); spec.loader.exec_module(helpers)
torch.set_num_threads(1)
register("test_digits")(helpers.digit_share)  # varies within groups: every step trains
"""


def rl_cfg(**kw) -> RLConfig:
    base = dict(init_from="-", problems={"source": "synthetic", "level": "easy", "split": "train", "n": 64},
                reward="test_digits", mode="structured", steps=4, prompts_per_step=4, group_size=8, token_budget=70,
                lr=3e-2, micro_batch_size=16, checkpoint_every=2,
                eps_high=0.2, rollout_batch_size=128)  # RLConfig's defaults before the stages' became its own
    base.update(kw)
    cfg = RLConfig(**base)
    cfg.check("test")
    return cfg


def train_standalone(cfg, root, ckpt, tracker=None):
    ctx = StageContext.standalone("rl_test", root, tracker=tracker)
    return ctx, train(cfg, ctx, ckpt, stage="rl_test", grammar="parallel_r1")


def step_rows(ctx) -> list[dict]:
    return [json.loads(line) for line in (ctx.out_dir / "metrics.jsonl").read_text().splitlines()]


class KillAt:
    """A tracker that raises at a given step, as a killed process would stop there."""

    def __init__(self, step):
        self.step = step

    def log_params(self, params):
        pass

    def log_metrics(self, metrics, step=None):
        if step == self.step:
            raise KeyboardInterrupt("killed")

    def log_artifact(self, path, artifact_path=None):
        pass


def assert_trained(init, weights: dict) -> None:
    """The run moved the parameters away from the start checkpoint: a comparison of two runs that trained
    nothing would pass whatever the resume did."""
    from safetensors.torch import load_file

    start = load_file(str(Path(init) / "model.safetensors"))
    assert max(float((weights[k] - start[k]).abs().max()) for k in start) > 1e-3


def sampled_batch(engine, tok, flat_group: bool):
    """Two prompts x 4 rollouts sampled by the engine, rewarded by digit share; group 0 made flat on request."""
    from parathink.engine import SamplingConfig
    from parathink.rewards import get_reward
    from parathink.training.rl_rollouts import assemble, score

    torch.manual_seed(0)
    prompts = [tok("Q: 1 + 2 = ?", add_special_tokens=False)["input_ids"], tok("Q: 3 * 4", add_special_tokens=False)["input_ids"]]
    samples = engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=40, seed=3), num_samples=4)
    digits = get_reward("test_digits")
    rollouts = [score(s.prompt_index, s, s.text, "3", "parallel_r1", digits, 0) for s in samples]
    for r in rollouts:
        if flat_group and r.group == 0:
            r.reward = 0.5  # group 0 is flat: zero advantage, skipped by the update
    return assemble(rollouts, 4, "group_std", drop_zero_variance=False, drop_invalid_format=False)

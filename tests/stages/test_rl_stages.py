"""Each GRPO-family stage runs through its module on a real tiny checkpoint: reads ``<init_from>/model``,
publishes ``model/`` and ``metrics.jsonl``, returns its metrics."""

import json
import shutil

import pytest
import torch

from parathink.pipeline.compose import compose
from parathink.pipeline.runner import stage_module
from parathink.stages.context import StageContext


@pytest.fixture(scope="module")
def run_root(tiny_checkpoint, tmp_path_factory):
    """A run directory whose `sft`, `rl_easy` and `base` outputs hold one tiny untrained checkpoint."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("run")
    for stage in ("sft", "rl_easy", "base"):
        shutil.copytree(tiny_checkpoint, root / stage / "model")
    return root


@pytest.mark.parametrize("stage", ["rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"])
def test_stage_runs_from_its_input_and_publishes(stage, run_root):
    small = [f"{stage}.steps=2", f"{stage}.prompts_per_step=2", f"{stage}.group_size=2", f"{stage}.token_budget=100",
             f"{stage}.problems.n=8"]
    cfg = compose(small)
    module = stage_module(cfg, stage)
    module.validate(cfg)
    ctx = StageContext.standalone(stage, run_root)
    metrics = module.run(cfg, ctx)
    assert (ctx.out_dir / "model" / "model.safetensors").exists()
    rows = [json.loads(x) for x in (ctx.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert metrics["steps"] == 2 and "reward_last" in metrics and "parallel_rate_last" in metrics

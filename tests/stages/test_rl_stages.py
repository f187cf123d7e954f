"""Each GRPO-family stage runs through its module on a real tiny checkpoint: reads ``<init_from>/model``,
publishes ``model/`` and ``metrics.jsonl``, returns its metrics."""

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from parathink.stages.context import StageContext

CONF = str(Path(__file__).resolve().parents[2] / "hydra_conf")


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    """A run directory whose `sft`, `rl_easy` and `base` outputs hold one tiny untrained checkpoint."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from parathink.data.synthetic import corpus
    from parathink.formats.tags import TAGS
    from parathink.modeling import save_model
    from parathink.modeling.tokenizer import train_tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("run")
    tok = train_tokenizer(corpus(200, seed=0))
    tok.add_special_tokens({"additional_special_tokens": [t for g in TAGS.values() for t in g]})
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                         max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = Qwen3ForCausalLM(config)
    for stage in ("sft", "rl_easy", "base"):
        save_model(model, tok, root / stage / "model")
    return root


@pytest.mark.parametrize("stage", ["rl_easy", "rl_hard", "rl_scaffold", "grpo_baseline"])
def test_stage_runs_from_its_input_and_publishes(stage, run_root):
    import importlib

    small = [f"{stage}.steps=2", f"{stage}.prompts_per_step=2", f"{stage}.group_size=2", f"{stage}.token_budget=100",
             f"{stage}.problems.n=8"]
    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = compose(config_name="config", overrides=small)
    module = importlib.import_module(f"parathink.stages.{stage}")
    module.validate(cfg)
    ctx = StageContext.standalone(stage, run_root)
    metrics = module.run(cfg, ctx)
    assert (ctx.out_dir / "model" / "model.safetensors").exists()
    rows = [json.loads(x) for x in (ctx.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert metrics["steps"] == 2 and "reward_last" in metrics and "parallel_rate_last" in metrics

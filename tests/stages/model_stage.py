"""A stage module for eval tests: publishes an untrained, very small Qwen3 checkpoint as ``model/``.

Only the mechanics of evaluation are under test here (loading, sampling through the engine, grading,
the results' schema); what a trained model scores is the curriculum's business.
"""

import torch


def run(cfg, ctx):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from parathink.data.synthetic import corpus
    from parathink.formats.tags import TAGS
    from parathink.modeling import save_model
    from parathink.modeling.tokenizer import train_tokenizer

    torch.manual_seed(ctx.seed)
    tok = train_tokenizer(corpus(200, seed=0))
    tok.add_special_tokens({"additional_special_tokens": [t for g in TAGS.values() for t in g]})
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                         max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    save_model(Qwen3ForCausalLM(config), tok, ctx.out_dir / "model")
    return {}

"""The `base` stage: the tiny default copies the shipped checkpoint; bad settings are refused up front;
base.train=true builds tokenizer + model and pretrains (tiny budget here; the full run is `make demo`'s job)."""

from __future__ import annotations

import pytest

from parathink.errors import ConfigError
from parathink.formats.layouts import TagIds
from parathink.modeling import load_model
from parathink.pipeline.compose import compose
from parathink.stages import base
from parathink.stages.context import StageContext


def config(*overrides):
    return compose(list(overrides))


def test_default_copies_the_shipped_base(tmp_path):
    ctx = StageContext.standalone("base", tmp_path)
    assert base.run(config(), ctx) == {"trained": 0.0}
    model, tok = load_model(ctx.out_dir / "model")
    assert model.config.model_type == "qwen3" and model.config.tie_word_embeddings
    assert 0.9e6 < sum(p.numel() for p in model.parameters()) < 1.2e6
    TagIds.from_tokenizer(tok, "parallel_r1")  # tags are single tokens already


@pytest.mark.parametrize("override,key", [("base.batch_size=0", "base.batch_size"),
                                          ("base.easy_fraction=1.5", "base.easy_fraction"),
                                          ("base.loss_on=prompt", "base.loss_on"),
                                          ("model.kind=other", "model.kind")])
def test_bad_settings_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        base.validate(config(override))


def test_train_builds_tokenizer_and_model(tmp_path):
    ctx = StageContext.standalone("base", tmp_path)
    ctx.progress = False
    m = base.run(config("base.train=true", "model.tokenizer.corpus_size=300", "base.train_size=64",
                        "base.batch_size=8", "base.max_steps=2", "base.eval_every=2", "base.eval_n=2",
                        "base.max_new_tokens=4", "base.report_n=2"), ctx)
    assert m["steps"] == 2 and 300 < m["vocab"] < 600
    assert {"greedy_easy", "greedy_hard"} <= set(m)
    _, tok = load_model(ctx.out_dir / "model", add_tags=False)
    TagIds.from_tokenizer(tok, "npr")  # every grammar's tags were added before saving

"""A small tokenizer (trained on a little synthetic corpus) with every grammar's tags, and tiny models."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from parathink.data.synthetic import corpus
from parathink.modeling import add_tag_tokens, build_tiny_model
from parathink.modeling.tokenizer import train_tokenizer

TINY_YAML = "hydra_conf/model/tiny.yaml"


@pytest.fixture(scope="session")
def tiny_cfg(request):
    return OmegaConf.load(request.config.rootpath / TINY_YAML)


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(corpus(400, seed=3), vocab_size=1024, min_frequency=2)


def _make_model(cfg, tok, attn="sdpa", scale: float = 0.0):
    """A fresh tiny model with tags; ``scale`` > 0 re-draws weights with that std, so positions and paths
    visibly change the logits (the default init's logits are nearly flat)."""
    torch.set_num_threads(1)
    cfg = OmegaConf.merge(cfg, {"attn_implementation": attn})
    model = build_tiny_model(cfg, tok)
    if scale:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" not in name:
                    p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model.eval()


@pytest.fixture(scope="session")
def tagged_tokenizer(tiny_cfg, tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    add_tag_tokens(_make_model(tiny_cfg, tok), tok)
    return tok


@pytest.fixture(scope="session")
def make_model(tiny_cfg):
    """``make_model(tok, attn="sdpa", scale=0.0)`` -> a fresh tiny model."""
    return lambda tok, attn="sdpa", scale=0.0: _make_model(tiny_cfg, tok, attn, scale)

"""The `base` stage: the model every later stage starts from (docs/design.md, "The curriculum").

- tiny default, ``base.train=false`` (default): copy the shipped checkpoint (``model.source``,
  ``builtin:tiny_base``) to ``model/`` — a real run also starts from a downloaded base, not from scratch;
- tiny default, ``base.train=true``: train the BPE tokenizer on the synthetic corpus, build the Qwen3 config,
  pretrain on sequential worked solutions (``parathink.training.pretrain``), add the tag tokens (mean-of-sub-token
  init, never trained: the base has no parallel behaviour), save ``model/``;
- ``model.kind=pretrained`` (e.g. Qwen3-4B-Base): load ``model.source`` (hub, s3://, GGUF, dir) and save it as
  ``model/``, so every later stage reads one local checkpoint.

Its gate (``stages/base/gate.py``): the model answers the held-out probe (an accuracy floor).
"""

from __future__ import annotations

import shutil
import time

from omegaconf import OmegaConf

from parathink.config.base import BaseConfig
from parathink.config.thresholds import BaseThresholds
from parathink.errors import ConfigError
from parathink.placement.roles import StageRole
from parathink.stages.base.gate import base_gate
from parathink.stages.context import StageContext
from parathink.stages.contract import Gate, StageSpec

KINDS = ("tiny", "pretrained")


def validate(cfg) -> None:
    settings(cfg)


def settings(cfg) -> BaseConfig:
    """The ``base`` section as a checked ``BaseConfig``, with what it asks of the model config."""
    if cfg.model.kind not in KINDS:
        raise ConfigError(f"model.kind={cfg.model.kind!r}: expected one of {KINDS}")
    base = BaseConfig.from_cfg(OmegaConf.to_container(cfg.base, resolve=True))
    if base.train and cfg.model.kind != "tiny":
        raise ConfigError("base.train=true only builds the tiny model; set model=tiny")
    return base


def run(cfg, ctx: StageContext) -> dict[str, float]:
    base = settings(cfg)
    out = ctx.out_dir / "model"
    if cfg.model.kind == "pretrained":
        from parathink.modeling import load_model, save_model

        model, tok = load_model(cfg.model.source, dtype=cfg.model.dtype,
                                attn_implementation=cfg.model.attn_implementation)
        save_model(model, tok, out)
        return {"params": float(sum(p.numel() for p in model.parameters()))}
    if not base.train:
        from parathink.modeling import resolve_source

        src = resolve_source(cfg.model.source)
        if isinstance(src, str):
            raise ConfigError(f"model.source={cfg.model.source!r} is not a local checkpoint; the tiny base is copied")
        shutil.copytree(src, out, dirs_exist_ok=True)
        return {"trained": 0.0}
    return _train_tiny(cfg, base, ctx)


def _train_tiny(cfg, base: BaseConfig, ctx: StageContext) -> dict[str, float]:
    import torch

    from parathink.data.synthetic import corpus
    from parathink.modeling import add_tag_tokens, build_tiny_model, load_tokenizer, save_model
    from parathink.modeling.tokenizer import train_tokenizer
    from parathink.training.pretrain import greedy_accuracy, pretrain

    t0 = time.perf_counter()
    if base.num_threads > 0:
        torch.set_num_threads(base.num_threads)
    tok_dir = ctx.work_dir / "tokenizer"
    if (tok_dir / "tokenizer.json").exists():  # resume: the weights in work_dir belong to this vocabulary
        tok = load_tokenizer(tok_dir)
    else:
        t = cfg.model.tokenizer
        tok = train_tokenizer(corpus(int(t.corpus_size), base.tokenizer_corpus_seed),
                              int(t.vocab_size), int(t.min_frequency))
        tok.save_pretrained(tok_dir)
    model = build_tiny_model(cfg.model, tok)
    ctx.tracker.log_params({"base.params": sum(p.numel() for p in model.parameters()), "base.vocab": len(tok)})
    torch.manual_seed(ctx.seed)
    metrics = pretrain(model, tok, base, work_dir=ctx.work_dir, seed=ctx.seed, tracker=ctx.tracker,
                       progress=ctx.progress)
    metrics["vocab"] = float(len(tok))
    if base.report_n > 0:  # test split, a seed no training or validation draw used
        for level in ("easy", "hard"):
            metrics[f"greedy_{level}"] = greedy_accuracy(model, tok, level, base.report_n, ctx.seed + 7,
                                                         base.max_new_tokens)
    add_tag_tokens(model, tok)
    save_model(model, tok, ctx.work_dir / "final")
    shutil.copytree(ctx.work_dir / "final", ctx.out_dir / "model", dirs_exist_ok=True)
    metrics["stage_minutes"] = (time.perf_counter() - t0) / 60
    ctx.tracker.log_metrics({f"base/{k}": v for k, v in metrics.items()})
    return metrics


STAGE = StageSpec(run=run, validate=validate, gate=Gate(base_gate, BaseThresholds),
                  role=StageRole(memory="weights", probes_model=True))

"""``BaseConfig``: the settings of the ``base`` stage (``stages/base/``, ``parathink.training.pretrain``).

The tiny curriculum copies its shipped base (``model.source``) unless ``train`` is true; then it pretrains a fresh
~1M-parameter Qwen3 on sequential worked solutions of the synthetic domain with these settings (AdamW, cosine,
a few minutes on 2 cores; what they reached: docs/findings.md). Real models (``model.kind=pretrained``) are only copied
into ``base/model``. The defaults are the tiny base's; ``hydra_conf/stage/base.yaml`` holds the gate thresholds.
The class is the Hydra schema of that file (``pipeline.compose``): a misspelt key or a wrong type fails when the
config is composed, ``check`` refuses values that cannot work. No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from parathink.config.fields import above, at_least, fraction
from parathink.config.thresholds import BaseThresholds
from parathink.errors import ConfigError
from parathink.training.optim_config import with_betas

LOSS_ON = ("response", "all")


@dataclass(frozen=True)
class BaseConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out
    train: bool = False  # true: pretrain the tiny model from scratch; false: copy model.source as the base

    # --- data ---
    train_size: int = 40000  # distinct training problems; ~1 epoch in the budget, so no memorisation
    easy_fraction: float = 0.5  # share of easy problems; hard ones carry the x and / the later stages need
    loss_on: str = "response"  # response | all: loss on the worked solution only, or on the problem text too
    tokenizer_corpus_seed: int = 0  # the synthetic corpus the BPE tokenizer is trained on

    # --- optimiser and schedule ---
    batch_size: int = 32  # larger batches cost time per step more than they gain in the time budget
    pack_len: int = 200  # > 0: pack each batch into rows of this many tokens (block-diagonal mask); 0: pad
    lr: float = 2.0e-3  # high for a 1M model; twice that diverged
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW moments
    weight_decay: float = at_least(0, 0.01)
    warmup_steps: int = at_least(0, 30)
    min_lr_ratio: float = fraction(0.05)  # cosine floor as a fraction of lr
    grad_clip: float = above(0, 1.0)  # max global gradient norm
    max_steps: int = 1600  # the cosine horizon; the run also stops at max_minutes or the target
    max_minutes: float = 6.3  # wall-clock budget (the stage must stay under 7 minutes)

    # --- validation, stopping, bookkeeping ---
    target_greedy_easy: float = fraction(0.98)  # stop once greedy accuracy on eval_n easy validation problems is this
    eval_every: int = 300  # steps between validation checks (each costs a greedy pass over eval_n problems)
    eval_n: int = 256  # validation problems (easy, test split, another seed than eval's)
    checkpoint_every: int = at_least(1, 100)  # steps between resume checkpoints in the work dir
    max_new_tokens: int = at_least(1, 96)  # greedy decoding budget; the longest worked solution is ~70 tokens
    report_n: int = at_least(0, 400)  # greedy easy/hard problems scored at the end for the stage's metrics (0: skip)
    num_threads: int = at_least(0, 0)  # torch threads; 0 keeps torch's default, 1 is faster when jobs share the cores
    # The stage's quality gate on model/ (stages/base/gate.py, docs/gates.md); its thresholds
    # are in base.yaml. Not part of the config hash.
    gate: BaseThresholds = field(default_factory=BaseThresholds)  # a wrong type or key fails at compose

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> BaseConfig:
        """Build and check the ``base`` section (a plain mapping); every error names ``base.<key>``."""
        unexpected = sorted(set(node) - {f.name for f in fields(cls)})
        if unexpected:
            raise ConfigError(f"base.{unexpected[0]}: unknown setting of the base stage")
        values = dict(node)
        with_betas(values)
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self) -> None:
        for key in ("train_size", "batch_size", "max_steps", "eval_every", "eval_n"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"base.{key} must be > 0, got {getattr(self, key)}")
        if not 0.0 <= self.easy_fraction <= 1.0:
            raise ConfigError(f"base.easy_fraction must be in [0, 1], got {self.easy_fraction}")
        if self.pack_len < 0:
            raise ConfigError(f"base.pack_len must be >= 0 (0 pads instead of packing), got {self.pack_len}")
        if self.loss_on not in LOSS_ON:
            raise ConfigError(f"base.loss_on must be 'response' or 'all', got {self.loss_on!r}")
        if self.lr <= 0 or self.max_minutes <= 0:
            raise ConfigError("base.lr and base.max_minutes must be > 0")

"""``SFTConfig``: the settings of the ``sft`` stage (``stages/sft/``, ``parathink.training.sft``).

Cold-start SFT on the filter's accepted traces (Parallel-R1 §3.2), with transformers' Trainer underneath. Every
option is declared here, with its default and what it does; the defaults are the tiny curriculum's (a 2-core CPU, a
~1M model, ~1-2k traces, a few minutes). ``hydra_conf/stage/sft.yaml`` holds the gate thresholds and an experiment
what it changes (``parallel_r1_seen``: the paper's Qwen3-4B-Base settings, lr 1e-5, global batch 128, 58 steps).
The class is the Hydra schema of that file (``pipeline.compose``), so a misspelt key or a value of the wrong type
fails when the config is composed; ``check`` then refuses a value that cannot work, naming ``sft.<key>``. No torch
here: ``parathink plan`` validates every stage in the orchestrator image, which has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parathink.config.fields import above, at_least, fraction, steps
from parathink.config.thresholds import SFTThresholds
from parathink.errors import ConfigError
from parathink.training.optim_config import with_betas

COLLATORS = ("causal", "structured")
OVERLONG = ("drop", "truncate")
PRECISIONS = ("fp32", "bf16")
# Synthetic replay traces appended to the filter's, and where each may open its block: path replay after a random
# number of the solution's lines, vote replay where its paths differ.
REPLAY_FORKS = {"path_replay": ("start", "random"), "vote_replay": ("start", "agreed")}
REPLAYS = tuple(REPLAY_FORKS)


@dataclass(frozen=True)
class Replay:
    """Synthetic traces of new problems (none of the filter's traces', none shared between the kinds)."""

    n: int = 0  # problems (path replay) or blocks (vote replay); 0 = off
    level: str = "hard"  # easy | hard: the synthetic level drawn
    seed: int = 7  # the draw, and the random choices made for each trace
    fork: str = "start"  # where the block opens: start (the response's start) | random (path) | agreed (vote)


@dataclass(frozen=True)
class SFTConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out
    init: str = "base"  # the stage whose model/ SFT starts from, or any model source (dir, s3://, .gguf, hub id)

    # --- data ---
    # structured: a 4-D mask and restarted positions (Unseen: paths do not see each other; keeps a tiny model's
    # accuracy) | causal: plain text (Seen: paths see each other and drift from the question).
    collator: str = "structured"
    max_length: int = 512  # prompt + response tokens; longer traces are dropped or truncated (counted)
    mask_wrong_paths: bool = True  # no loss on a path whose own \boxed answer is wrong (kept for the summary's context)
    overlong: str = "drop"  # drop | truncate (truncation cuts the answer off: the trace teaches a dangling block)
    # Worked solutions of new synthetic problems trained as the first path of an opened block (no summary, no eos;
    # loss on the solution only): rehearses the arithmetic SFT costs inside paths. Any grammar. fork: start | random
    # (a uniform number of the solution's lines comes first).
    path_replay: Replay = field(default_factory=lambda: Replay(seed=7))
    # Blocks of two worked solutions and one with an arithmetic slip, with the vote summary; loss on the summary and
    # the final answer only: trains the summary to copy the majority answer whole (a tiny model blends the digits of
    # the paths' answers). fork: start | agreed (the lines the three paths share, those before the slip, come first).
    vote_replay: Replay = field(default_factory=lambda: Replay(seed=11))
    # ParaThinker: each block's thoughts get distinct labels drawn from 1..model.parathinker_max_paths, so that every
    # <thinkN> tag and path vector is trained and inference may use more paths than any training trace had (§3).
    relabel_thoughts: bool = False

    # --- optimiser and schedule (the paper's: AdamW, cosine, warm-up 0.1, weight decay 0.01) ---
    lr: float = 1.2e-3  # the tiny model's; higher wrecks the paths, lower learns the format less (docs/findings.md)
    weight_decay: float = at_least(0, 0.01)
    warmup_ratio: float = fraction(0.1)  # share of the steps warming up
    scheduler: str = "cosine"  # transformers' lr_scheduler_type
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW moments
    grad_clip: float = 1.0  # max global gradient norm
    global_batch: int = 32  # sequences per optimiser step (the paper: 128); accumulation fills micro_batch x world
    micro_batch: int = 16  # sequences per device and forward; lowers activation memory, not the result
    epochs: float = above(0, 6.0)  # passes over the traces (the paper: 2 for Seen); max_steps > 0 overrides it
    max_steps: int = steps(-1)  # > 0: this many optimiser steps, whatever the epochs
    # Wall-clock cap: stops and checkpoints; 0 = none. A cap cuts the cosine schedule before it anneals, and the
    # format may then not be learnt (the gate's full_schedule check fails such a model).
    max_minutes: float = at_least(0, 0.0)

    # --- checkpoints, precision, launch ---
    save_steps: int = 25  # steps between checkpoints in the work dir (resume after a kill)
    save_total_limit: int = at_least(1, 2)  # checkpoints kept in the work dir
    # fp32 | bf16 (GPU): the forward's arithmetic. The parameters train in fp32 either way (the stage loads the model
    # in fp32 and bf16 runs under autocast, or DeepSpeed's bf16 optimiser keeps fp32 masters), so that a small
    # update is not rounded away and the published model carries the unrounded result.
    precision: str = "fp32"
    # Recompute each decoder layer in the backward instead of keeping its activations (docs/gpu.md): about 1/3 more
    # compute for a tenth of the activation memory; the same gradients.
    gradient_checkpointing: bool = False
    # Label tokens per chunk of the lm_head projection and cross-entropy (no [B, L, V] logits tensor whole).
    logit_chunk_tokens: int = at_least(1, 1024)
    num_threads: int = at_least(0, 0)  # torch threads; 0 keeps torch's default, 1 when other jobs share the cores
    deepspeed: str | None = None  # a DeepSpeed JSON (hydra_conf/deepspeed/zero2.json, zero3.json); null = none
    fsdp: str | None = None  # torch FSDP through accelerate, e.g. "full_shard auto_wrap"; null = none
    fsdp_config: dict[str, Any] = field(default_factory=dict)  # passed to TrainingArguments.fsdp_config
    # The stage's quality gate on model/ (stages/sft/gate.py, docs/gates.md); its thresholds
    # and probe are in sft.yaml. Not part of the config hash.
    gate: SFTThresholds = field(default_factory=SFTThresholds)  # a wrong type or key fails at compose

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> SFTConfig:
        """Build and check the ``sft`` section (resolved, as plain data; ``deepspeed`` a path that exists here)."""
        values = dict(node)
        for key in REPLAYS:
            if key in values:
                values[key] = Replay(**dict(values[key]))
        with_betas(values)
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self) -> None:
        if self.collator not in COLLATORS:
            raise ConfigError(f"sft.collator={self.collator!r}: expected one of {COLLATORS}")
        if self.overlong not in OVERLONG:
            raise ConfigError(f"sft.overlong={self.overlong!r}: expected one of {OVERLONG}")
        for key in ("max_length", "global_batch", "micro_batch", "save_steps"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"sft.{key} must be > 0, got {getattr(self, key)}")
        if self.global_batch % self.micro_batch:
            raise ConfigError(f"sft.global_batch={self.global_batch} must be a multiple of "
                              f"sft.micro_batch={self.micro_batch}")
        if self.lr <= 0:
            raise ConfigError(f"sft.lr must be > 0, got {self.lr}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"sft.precision={self.precision!r}: expected fp32 or bf16")
        if self.deepspeed and not Path(self.deepspeed).is_file():
            raise ConfigError(f"sft.deepspeed={self.deepspeed!r}: no such DeepSpeed JSON file")
        for key in REPLAYS:
            self._check_replay(key, getattr(self, key))

    @staticmethod
    def _check_replay(key: str, replay: Replay) -> None:
        if replay.n < 0:
            raise ConfigError(f"sft.{key}.n must be >= 0, got {replay.n}")
        if replay.n > 0 and replay.level not in ("easy", "hard"):
            raise ConfigError(f"sft.{key}.level={replay.level!r}: expected easy or hard")
        if replay.fork not in REPLAY_FORKS[key]:
            raise ConfigError(f"sft.{key}.fork={replay.fork!r}: expected one of {REPLAY_FORKS[key]}")


def start_stage(cfg) -> str | None:
    """The stage whose ``model/`` SFT starts from; None when ``sft.init`` is a model source (dir, s3://, hub id)."""
    init = str(cfg.sft.init)
    return init if init in ("base", "sft") or init.startswith("rl_") else None

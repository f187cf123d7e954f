"""The settings of every GRPO-family stage (rl_easy, rl_hard, rl_scaffold, grpo_baseline), checked before any rollout.

Each field is documented where it is declared and grouped by concern (TRL's GRPOConfig habit); the values of the
tiny default and their trade-offs live in ``hydra_conf/stage/<stage>.yaml``. ``from_cfg`` turns a stage's config
node into an ``RLConfig`` and raises ``ValueError`` naming ``<stage>.<key>`` for any value that cannot work,
so a bad config fails in ``validate(cfg)`` before a model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from parathink.data import synthetic
from parathink.training.advantages import ADVANTAGES
from parathink.training.losses import AGGREGATIONS, POLICY_LOSSES, LossSpec

ENGINE_MODES = ("causal", "structured")
MIXED_PRECISION = ("no", "bf16", "fp16")
OLD_LOGPROBS = ("engine", "recompute")


@dataclass(frozen=True)
class RLConfig:
    # --- start, data, reward (Parallel-R1 §3.3: which model, which problems, which schedule) ---
    init_from: str = "sft"  # earlier stage whose ``model/`` is the starting policy
    # Train problems, any spec of parathink.data.sources.load_problems: the synthetic domain
    # ({source: synthetic, level, split: train, n}) or a data set ({source: gsm8k | dapo_math_17k, uri, limit}).
    # Steps cycle through them, reshuffled each epoch.
    problems: Mapping[str, Any] = field(default_factory=lambda: {"source": "synthetic", "level": "hard",
                                                                 "split": "train", "n": 2000})
    reward: str = "accuracy"  # reward schedule name in parathink.rewards
    scaffold_steps: int = 200  # reward=scaffold: alternating S2 reward up to this step, accuracy after (§4.3)
    mode: str = "structured"  # engine mode: causal (Seen) or structured (Unseen, paths forked)
    num_paths: int = 2  # paths per block in structured mode

    # --- rollouts ---
    steps: int = 100  # optimiser steps (each on freshly sampled rollouts)
    prompts_per_step: int = 16  # problems per step
    group_size: int = 8  # rollouts per problem, GRPO's G (>= 2: a group of one has no baseline)
    token_budget: int = 160  # tokens per rollout, prompt included and every branch counted
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling threshold
    rollout_batch_size: int = 128  # rows the engine decodes together (forked paths count as rows)
    repetition_penalty_in_paths: float = 1.0  # NPR: 1.02 inside steps only; 1.0 = off
    min_fork_budget: int = 0  # NPR: no fork with fewer tokens of budget left (1024 in the paper)
    cuda_graphs: bool = True  # on a GPU, replay the engine's decode step as CUDA graphs; false = eager launches

    # --- objective (DeepSeekMath eq. 3; DAPO; NPR's PAPO) ---
    advantage: str = "group_std"  # parathink.training.advantages registry
    policy_loss: str = "clipped"  # parathink.training.losses registry
    loss_agg: str = "token_mean"  # token_mean (DAPO) or seq_mean (GRPO)
    eps_low: float = 0.2  # lower clip of the ratio
    eps_high: float = 0.2  # upper clip of the ratio (DAPO clip-higher when > eps_low)
    kl_coef: float = 0.0  # k3 KL to the frozen start model; 0 loads no reference model
    drop_zero_variance: bool = False  # DAPO dynamic sampling without refill: drop all-same-reward groups
    drop_invalid_format: bool = False  # PAPO / NPR: drop rollouts that break the format before the update
    updates_per_step: int = 1  # optimiser passes over one step's rollouts (PPO epochs, each one step)
    micro_batch_size: int = 64  # rollouts per forward/backward (gradient accumulation inside a step)

    # --- optimiser ---
    lr: float = 2e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0  # linear warm-up, then constant
    grad_clip: float = 1.0  # max global gradient norm (<= 0 disables)

    # --- robustness and bookkeeping ---
    max_nan_steps: int = 3  # consecutive steps with a NaN loss or reward before training stops
    checkpoint_every: int = 25  # steps between resumable checkpoints in the work dir
    max_minutes: float = 0.0  # wall-clock cap: stop after the step that crosses it and publish; 0 = none
    # Training problems sampled (group_size each, one fixed seed) by the start and the final policy, so the
    # stage reports its training reward before and after on the same problems and draws; 0 = off.
    probe_prompts: int = 0
    mixed_precision: str = "no"  # accelerate's mixed precision
    # DeepSpeed JSON for a multi-GPU launch: ZeRO-1/2 shard optimiser state and gradients (the engine samples with
    # the whole parameters every process keeps); ZeRO-3 shards the parameters too, and the engine then samples
    # with a full copy refreshed once per step. null = DDP under torchrun, or one process.
    deepspeed: str | None = None
    # Where the ratio's old log-probs come from: the engine's sampling pass (free), or a no-grad pass of the
    # training forward before the update (one more forward). With bf16 the two differ (measured on an H200:
    # mean 6e-3, max 0.1 nats per token), which biases the ratio; fp32 keeps them within 1e-4.
    old_logprobs: str = "engine"
    num_threads: int = 0  # torch CPU threads; 0 keeps torch's default
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys the stage file adds (``enabled``, ``gate``)

    @property
    def loss_spec(self) -> LossSpec:
        return LossSpec(policy_loss=self.policy_loss, loss_agg=self.loss_agg, eps_low=self.eps_low,
                        eps_high=self.eps_high, kl_coef=self.kl_coef)

    @property
    def reward_params(self) -> dict[str, int]:
        return {"switch_step": self.scaffold_steps} if self.reward == "scaffold" else {}

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any], stage: str) -> "RLConfig":
        """Build and check; every error names ``<stage>.<key>`` and what was wrong."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: node[k] for k in node if k in known}
        extra = {k: node[k] for k in node if k not in known}
        unexpected = sorted(set(extra) - {"enabled", "gate"})  # gate: read by parathink.quality.rl_gate
        if unexpected:
            raise ValueError(f"{stage}.{unexpected[0]}: unknown RL setting")
        if "problems" in values:
            values["problems"] = dict(values["problems"])
        if "betas" in values:
            values["betas"] = tuple(float(b) for b in values["betas"])
        if values.get("deepspeed"):  # written relative to the checkout; found in the wheel's copy in a pod
            from parathink.config import resolve_config_path

            values["deepspeed"] = resolve_config_path(str(values["deepspeed"]))
        cfg = cls(**values, extra=extra)
        cfg.check(stage)
        return cfg

    def check(self, stage: str) -> None:
        from parathink.rewards import REWARDS

        def bad(key: str, why: str) -> ValueError:
            return ValueError(f"{stage}.{key}={getattr(self, key)!r}: {why}")

        for key, registry in (("advantage", ADVANTAGES), ("policy_loss", POLICY_LOSSES),
                              ("loss_agg", AGGREGATIONS), ("reward", REWARDS)):
            if getattr(self, key) not in registry:
                raise bad(key, f"unknown {key.replace('_', ' ')}; expected one of {sorted(registry)}")
        if self.mode not in ENGINE_MODES:
            raise bad("mode", f"expected one of {ENGINE_MODES}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise bad("mixed_precision", f"expected one of {MIXED_PRECISION}")
        if self.old_logprobs not in OLD_LOGPROBS:
            raise bad("old_logprobs", f"expected one of {OLD_LOGPROBS}")
        self._check_problems(stage)
        self._check_deepspeed(stage)
        if self.group_size < 2:
            raise bad("group_size", "a group needs >= 2 rollouts (one rollout has no group baseline)")
        for key in ("steps", "prompts_per_step", "token_budget", "updates_per_step",
                    "micro_batch_size", "max_nan_steps", "checkpoint_every", "rollout_batch_size"):
            if int(getattr(self, key)) < 1:
                raise bad(key, "must be >= 1")
        if self.num_paths < 2:
            raise bad("num_paths", "a block needs >= 2 paths")
        if not self.temperature > 0:
            raise bad("temperature", "must be > 0 (sampling is what GRPO learns from)")
        if not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not self.repetition_penalty_in_paths > 0:
            raise bad("repetition_penalty_in_paths", "must be > 0 (1.0 = off)")
        if self.min_fork_budget < 0:
            raise bad("min_fork_budget", "must be >= 0")
        if not self.lr > 0:
            raise bad("lr", "must be > 0")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise bad("eps_low", "need 0 <= eps_low < 1 and eps_high >= 0")
        if self.kl_coef < 0:
            raise bad("kl_coef", "must be >= 0")
        if self.num_threads < 0:
            raise bad("num_threads", "must be >= 0 (0 = torch's default)")
        if self.max_minutes < 0:
            raise bad("max_minutes", "must be >= 0 (0 = no cap)")
        if self.probe_prompts < 0:
            raise bad("probe_prompts", "must be >= 0 (0 = no before/after probe)")
        if self.warmup_steps < 0:
            raise bad("warmup_steps", "must be >= 0")
        if self.policy_loss == "on_policy" and self.updates_per_step > 1:
            raise bad("updates_per_step", "the strict on-policy loss (PAPO) allows one update per rollout batch")

    def _check_deepspeed(self, stage: str) -> None:
        if not self.deepspeed:
            return
        import json
        from pathlib import Path

        where = f"{stage}.deepspeed={self.deepspeed}"
        try:
            ds = json.loads(Path(self.deepspeed).read_text(encoding="utf-8"))
        except OSError as e:
            raise ValueError(f"{where}: cannot read it ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg} at line {e.lineno})") from None
        zero = (ds.get("zero_optimization") or {}).get("stage", 0)
        if zero not in (0, 1, 2, 3):
            raise ValueError(f"{where}: zero_optimization.stage={zero!r}, expected 0, 1, 2 or 3")

    def _check_problems(self, stage: str) -> None:
        spec = dict(self.problems)
        where = f"{stage}.problems"
        if not spec.get("source"):
            raise ValueError(f"{where}={spec}: needs a 'source' (synthetic, gsm8k, dapo_math_17k, ...)")
        if spec["source"] != "synthetic":
            return  # the loader itself names a bad source or URI, still before any rollout
        if spec.get("split") != "train":
            raise ValueError(f"{where}.split={spec.get('split')!r}: RL trains on the train split only")
        synthetic.check_spec(spec, where)  # level, n (bounded), seed

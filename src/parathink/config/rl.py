"""``RLConfig``: the settings of every GRPO-family stage (rl_easy, rl_hard, rl_scaffold, grpo_baseline).

Every option is declared here, with its default and what it does, grouped by concern (TRL's GRPOConfig habit).
The defaults are the tiny curriculum's algorithm settings (the experiment ``parathink run`` runs on a laptop)
wherever its four RL stages agree. ``hydra_conf/stage/rl.yaml`` adds what the demo shares (the wall-clock safety
stop, the before/after probe) and the gate thresholds, each stage's file (``rl_easy.yaml``, ...) what sets that
stage apart (its number of steps among them), and an experiment what it changes (``parallel_r1_seen``: the paper's
batch, budget and learning rate).
The class is the Hydra schema of those files (``pipeline.compose``), so a misspelt key or a value of the wrong type
fails when the config is composed; ``check`` then refuses any value that cannot work, naming ``<stage>.<key>``,
before a model is loaded. No torch here: ``parathink plan`` validates RL stages
in the orchestrator image, which has none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from parathink.config.fields import at_least, within
from parathink.config.rollout import RolloutBackend
from parathink.config.thresholds import RLThresholds
from parathink.errors import ConfigError
from parathink.training.optim_config import with_betas

ENGINE_MODES = ("causal", "structured")
MIXED_PRECISION = ("no", "bf16", "fp16")
OLD_LOGPROBS = ("auto", "engine", "recompute")
# The names parathink.training.advantages and .losses register (a test keeps them equal); listed here so that
# validation needs no torch.
ADVANTAGES = ("group_std", "batch_std", "none")
POLICY_LOSSES = ("clipped", "on_policy")
AGGREGATIONS = ("token_mean", "seq_mean")


def _hard_problems() -> dict[str, Any]:
    return {"source": "synthetic", "level": "hard", "split": "train", "n": 20000, "uri": None, "limit": None}


@dataclass(frozen=True)
class RolloutConfig(RolloutBackend):
    """Which engine samples the rollouts (``<stage>.rollout``; parathink.vllm_rollout says how vLLM is colocated).
    vllm recomputes the old log-probs (old_logprobs: auto or recompute)."""

    # Truncated importance sampling (vllm only): each token's loss is weighted by min(pi_train / pi_rollout, tis_cap)
    # of the sampling-time policy, correcting for vLLM's forward not being the trainer's; 0 = off.
    tis_cap: float = at_least(0, 2.0)
    gap_threshold: float = at_least(0, 0.1)  # nats: the logged share of tokens whose rollout/training gap exceeds it


@dataclass(frozen=True)
class RLConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out

    # --- start, data, reward (Parallel-R1 §3.3: which model, which problems, which schedule) ---
    init_from: str = "sft"  # earlier stage whose ``model/`` is the starting policy
    # Train problems, any spec of parathink.data.sources.load_problems: the synthetic domain
    # ({source: synthetic, level, split: train, n}) or a data set ({source: gsm8k | dapo_math_17k, uri, limit}: uri =
    # local file, s3:// or hub:ORG/NAME, limit = first N rows). Steps cycle through them, reshuffled each epoch; more
    # than steps x prompts_per_step means none is seen twice.
    problems: dict[str, Any] = field(default_factory=_hard_problems)
    reward: str = "accuracy"  # reward schedule in parathink.rewards (accuracy: R_acc = +1 / -1)
    scaffold_steps: int = at_least(0, 200)  # reward=scaffold: S2 alternating reward to this step, then accuracy (§4.3)
    mode: str = "structured"  # engine mode: structured (paths forked, Unseen layout) | causal (Seen, one stream)
    num_paths: int = 2  # paths forked per block in structured mode (Parallel-R1's public code: 2)

    # --- rollouts ---
    steps: int = 300  # optimiser steps, each on fresh rollouts: the stage's length, whatever the machine's load
    prompts_per_step: int = 16  # problems per step, group_size rollouts each; split evenly over the processes
    group_size: int = 8  # rollouts per problem, GRPO's G: >= 2, larger = a better baseline, slower steps
    # Tokens per rollout, the prompt included and every path counted; the engine closes open tags past it. The tiny
    # hard problems: prompt <= 95 tokens + 3 paths and a summary <= ~300.
    token_budget: int = 420
    # The papers' separate lengths (Parallel-R1's public RL script: max_prompt_length=2000, max_response_length=3000;
    # docs/reference.md), within token_budget: a prompt longer than max_prompt_tokens is refused before any rollout
    # (verl truncates it from the left; a cut problem is another problem), and a call samples at most
    # max_response_tokens new tokens (every path counted), so that a short prompt does not hand its unused share to
    # the response. 0 = no bound of its own: the prompt is bounded by token_budget alone and the response takes what
    # token_budget leaves after the call's longest prompt (the tiny curriculum's behaviour).
    max_prompt_tokens: int = at_least(0, 0)
    max_response_tokens: int = at_least(0, 0)
    temperature: float = 1.0  # sampling temperature (the paper trains and evaluates at 1.0)
    top_p: float = 1.0  # nucleus sampling; < 1 lowers variance but biases the on-policy log-probs
    # Rows the engine decodes at once (forked paths count: 128 rollouts x 3 paths); larger = faster until memory
    # runs out.
    rollout_batch_size: int = 384
    repetition_penalty_in_paths: float = 1.0  # NPR: 1.02 inside paths only, against looping paths; 1.0 = off
    min_fork_budget: int = 0  # NPR: no fork with fewer budget tokens left (1024), no block cut mid-path; 0 = off
    cuda_graphs: bool = True  # GPU only: replay the engine's decode step as CUDA graphs; false = eager launches
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # which engine samples (native | vllm)

    # --- objective (DeepSeekMath eq. 3; DAPO; NPR's PAPO) ---
    advantage: str = "group_std"  # group_std (GRPO) | batch_std (PAPO) | none (Dr. GRPO)
    policy_loss: str = "clipped"  # clipped (PPO/GRPO surrogate) | on_policy (PAPO: pi/sg(pi), no clipping)
    loss_agg: str = "token_mean"  # token_mean (DAPO, token-level) | seq_mean (GRPO, sample-level)
    eps_low: float = 0.2  # lower clip range of the ratio
    eps_high: float = at_least(0, 0.28)  # > eps_low lets rare good tokens grow (DAPO clip-higher, Parallel-R1 S2)
    kl_coef: float = 0.0  # weight of the k3 KL to the frozen start model; 0 loads no reference (Parallel-R1's runs)
    drop_zero_variance: bool = False  # DAPO dynamic sampling without refill: drop groups that all scored the same
    drop_invalid_format: bool = False  # PAPO / NPR: drop rollouts that break the format before the update
    updates_per_step: int = 1  # passes over a step's rollouts; > 1 makes later passes off-policy (clipping acts)
    micro_batch_size: int = 64  # rollouts per forward/backward; lowers memory, not the result
    # Padded tokens (rows x longest row) per forward/backward at most, whatever micro_batch_size allows: long rollouts
    # then go fewer to a micro-batch, short ones more; 0 = rows only. Lowers memory, not the result.
    micro_batch_tokens: int = at_least(0, 0)

    # --- memory (docs/gpu.md: the memory model `parathink plan` prints) ---
    # Recompute each decoder layer in the backward instead of keeping its activations: ~1/3 more update compute for
    # a tenth of its activation memory; the same gradients.
    gradient_checkpointing: bool = False
    # Response tokens per chunk of the lm_head projection and log-softmax in the update (no [B, T, V] tensor whole).
    logprob_chunk_tokens: int = at_least(1, 1024)
    # The engine's KV cache, in GiB per process; 0 = sized by the memory model on a GPU (what
    # gpu_memory_utilization of the device leaves after weights, gradients, optimiser, update and workspace) and
    # unbounded on a CPU (the worst case of the call, as before). Rows beyond it wait, or are preempted and recomputed.
    kv_cache_gib: float = at_least(0, 0.0)
    gpu_memory_utilization: float = within(0, 1, 0.9, open_low=True)  # of the device's memory, for everything

    # --- optimiser ---
    lr: float = 2e-5  # the tiny model's (higher collapsed it: docs/findings.md); the paper's 4B runs: 1e-6
    weight_decay: float = at_least(0, 0.0)  # AdamW decay; RL runs usually keep none
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW moments
    warmup_steps: int = 0  # linear warm-up steps, then constant (the paper's RL lr is constant)
    grad_clip: float = 1.0  # max global gradient norm (<= 0 disables); lower = steadier, slower

    # --- robustness and bookkeeping ---
    max_nan_steps: int = 3  # consecutive steps with a NaN loss or reward (each skipped) before training stops
    checkpoint_every: int = 25  # steps between resumable checkpoints in the work dir; smaller = less lost on a kill
    # Safety stop on the steps' wall-clock time (the probes not counted), not a budget: a stage that crosses it
    # publishes what it has, warns, and fails its gate (fewer steps than `steps`); 0 = none.
    max_minutes: float = 0.0
    # Training problems sampled (group_size each, one fixed seed) by the start and the final policy, so the stage
    # reports its training reward before and after on the same problems and draws; 0 = off.
    probe_prompts: int = 0
    mixed_precision: str = "no"  # accelerate: no | bf16 | fp16
    # DeepSpeed JSON for a multi-process launch: ZeRO-1/2 shard optimiser state and gradients (the engine samples
    # with the whole parameters every process keeps); ZeRO-3 shards the parameters too, and the engine then samples
    # with a full copy refreshed once per step (hydra_conf/deepspeed/zero2.json, zero3.json). null = DDP under
    # torchrun, or one process.
    deepspeed: str | None = None
    # Where the ratio's old log-probs come from: the engine's sampling pass (free), or a no-grad pass of the
    # training forward before the update (one more forward). In bf16 the two differ, which biases the ratio (the
    # GPU check in docs/findings.md); in fp32 the native engine is tested to agree within 1e-4. auto: engine with
    # the native backend, recompute with vllm (whose forward is never the trainer's).
    old_logprobs: str = "auto"
    num_threads: int = 0  # torch CPU threads; 0 keeps torch's default (all cores), 1 when other jobs share them
    # The stage's quality gate, judged from its own records when it finishes (stages/rl/gate.py, docs/
    # gates.md); its thresholds are in rl.yaml. Not part of the config hash.
    gate: RLThresholds = field(default_factory=RLThresholds)  # a wrong type or key fails at compose

    @property
    def loss_spec(self):
        from parathink.training.losses import LossSpec

        return LossSpec(policy_loss=self.policy_loss, loss_agg=self.loss_agg, eps_low=self.eps_low,
                        eps_high=self.eps_high, kl_coef=self.kl_coef)

    @property
    def recompute_old_logprobs(self) -> bool:
        """Whether the update recomputes the old log-probs with the training forward (``old_logprobs``)."""
        return self.old_logprobs == "recompute" or (self.old_logprobs == "auto" and self.rollout.backend == "vllm")

    @property
    def reward_params(self) -> dict[str, int]:
        return {"switch_step": self.scaffold_steps} if self.reward == "scaffold" else {}

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any], stage: str) -> RLConfig:
        """Build and check a stage's section (a plain mapping); every error names ``<stage>.<key>``."""
        known = {f.name for f in fields(cls)}
        unexpected = sorted(set(node) - known)
        if unexpected:
            raise ConfigError(f"{stage}.{unexpected[0]}: unknown RL setting")
        values = dict(node)
        if "problems" in values:
            values["problems"] = dict(values["problems"])
        values["rollout"] = RolloutConfig.build(values.get("rollout"), f"{stage}.rollout")
        with_betas(values)
        cfg = cls(**values)
        cfg.check(stage)
        return cfg

    def check(self, stage: str) -> None:
        from parathink.rewards import REWARDS

        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"{stage}.{key}={getattr(self, key)!r}: {why}")

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
        self._check_rollout(stage)
        self._check_problems(stage)
        self._check_deepspeed(stage)
        if self.group_size < 2:
            raise bad("group_size", "a group needs >= 2 rollouts (one rollout has no group baseline)")
        for key in ("steps", "prompts_per_step", "token_budget", "updates_per_step",
                    "micro_batch_size", "max_nan_steps", "checkpoint_every", "rollout_batch_size"):
            if int(getattr(self, key)) < 1:
                raise bad(key, "must be >= 1")
        self._check_lengths(stage)
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

    def _check_rollout(self, stage: str) -> None:
        """vLLM samples one causal stream per rollout: a structured mode, or old log-probs taken from its own
        forward, cannot work with it (one line each, before any model loads)."""
        self.rollout.check(f"{stage}.rollout", [(f"{stage}.mode", self.mode)])
        if self.rollout.backend != "vllm":
            return
        if self.old_logprobs == "engine":
            raise ConfigError(f"{stage}.rollout.backend=vllm: needs {stage}.old_logprobs=recompute or auto (vLLM's "
                              f"log-probs are not the training forward's; the ratio must start from the trainer's own)")
        if self.repetition_penalty_in_paths != 1.0 or self.min_fork_budget:
            raise ConfigError(f"{stage}.rollout.backend=vllm: repetition_penalty_in_paths and min_fork_budget are "
                              f"native-engine rules of forked paths; leave them at 1.0 and 0")

    def _check_lengths(self, stage: str) -> None:
        """max_prompt_tokens and max_response_tokens each leave room in token_budget, and together fit in it."""
        prompt, response, budget = self.max_prompt_tokens, self.max_response_tokens, self.token_budget
        for key, value in (("max_prompt_tokens", prompt), ("max_response_tokens", response)):
            if value >= budget:
                raise ConfigError(f"{stage}.{key}={value}: must be below {stage}.token_budget={budget} (0 = no "
                                  f"bound of its own)")
        if prompt and response and prompt + response > budget:
            raise ConfigError(f"{stage}.max_prompt_tokens={prompt} + {stage}.max_response_tokens={response} = "
                              f"{prompt + response}: more than {stage}.token_budget={budget}; raise the budget to "
                              f"{prompt + response} or lower one of them")

    def response_tokens(self, longest_prompt: int) -> int:
        """New tokens a call whose longest prompt is ``longest_prompt`` tokens may sample (every path counted)."""
        left = self.token_budget - longest_prompt
        return min(left, self.max_response_tokens) if self.max_response_tokens else left

    def _check_deepspeed(self, stage: str) -> None:
        if not self.deepspeed:
            return
        where = f"{stage}.deepspeed={self.deepspeed}"
        try:
            ds = json.loads(Path(self.deepspeed).read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"{where}: cannot read it ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: not JSON ({e.msg} at line {e.lineno})") from None
        zero = (ds.get("zero_optimization") or {}).get("stage", 0)
        if zero not in (0, 1, 2, 3):
            raise ConfigError(f"{where}: zero_optimization.stage={zero!r}, expected 0, 1, 2 or 3")

    def _check_problems(self, stage: str) -> None:
        spec = dict(self.problems)
        where = f"{stage}.problems"
        if not spec.get("source"):
            raise ConfigError(f"{where}={spec}: needs a 'source' (synthetic, gsm8k, dapo_math_17k, ...)")
        if spec["source"] != "synthetic":
            return  # the loader itself names a bad source or URI, still before any rollout
        if spec.get("split") != "train":
            raise ConfigError(f"{where}.split={spec.get('split')!r}: RL trains on the train split only")
        from parathink.data import synthetic
        from parathink.errors import BadInput

        try:
            synthetic.check_spec(spec, where)  # level, n (bounded), seed
        except BadInput as err:
            raise ConfigError(str(err)) from None

"""The GRPO family in one loop: the four RL stages of ``stages/rl/`` differ only in config.

Per step (Parallel-R1 §3.3; DeepSeekMath §4.1 for GRPO):
1. draw ``prompts_per_step`` problems (a pure function of seed and step, so a resumed run draws the same);
2. sample ``group_size`` rollouts per problem with ``parathink.engine`` in the configured mode: causal (Seen,
   one stream) or structured (paths forked as rows sharing the prefix's KV cache, Unseen layout);
3. grade, parse and reward them with the step's reward schedule (``parathink.rewards``);
4. group-relative advantages; PAPO / DAPO drops (``rl_rollouts.assemble``);
5. recompute log-probs under the *same* layout the engine sampled with, and take ``updates_per_step``
   optimiser steps on the clipped (GRPO) or strict on-policy (PAPO) loss;
6. log, checkpoint.

Read it top to bottom: ``train`` is the recipe (``setup``, ``resume``, the start probe, the loop over steps,
``publish``); ``update`` is step 5. What a data-parallel or DeepSpeed launch adds (whole-step sums, the passes every
process must run, ZeRO-3's whole copy for the engine) is in ``rl_parallel``.

Where this departs from the papers, and why:
- No refill after DAPO's zero-variance drop: the step trains on fewer rollouts instead of sampling more (a
  bounded step time matters more on 2 cores than a constant batch).
- The old log-probs are the engine's by default, not a second forward: the engine is tested to report what the
  training forward recomputes (<= 1e-4 in fp32), so with one update per step the ratio is 1 and clipping is
  inactive, as in a strictly on-policy run. Clipping acts from the second pass on (``updates_per_step`` > 1).
  In bf16 the two differ: ``old_logprobs=recompute`` then pays one no-grad forward so that the ratio starts at 1.
- The reference model (KL) is loaded only when ``kl_coef`` > 0; Parallel-R1's public runs use no KL. Without
  it the logged ``kl`` is empty (NaN), not a made-up figure.
- ``entropy`` is logged as -mean log pi(token) over the sampled tokens (unbiased at T=1, top_p=1), not from the
  full distribution, which would cost as much as the rest of the update.

accelerate sits underneath (device placement, mixed precision, checkpoint state, DDP, DeepSpeed). Under a
multi-process launch (torchrun or ``accelerate launch``) the loop is data-parallel: each process samples its share
of the step's problems with its own sampling stream; the scores of every process are gathered, so advantages,
drops and metrics are those of the whole step; the loss is normalised by the whole step's token count; and every
process runs the backward passes the collectives expect, so the averaged gradient is the whole step's.
``<stage>.deepspeed`` adds ZeRO-1/2 (gradients and optimiser state sharded, parameters whole for the engine) or
ZeRO-3 (parameters sharded too: the engine samples with a full copy refreshed once per step). FSDP is refused
(``rl_parallel.check_launch`` says why).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from parathink import distributed, jsonl, storage
from parathink.config.rl import RLConfig
from parathink.errors import ConfigError, ParathinkError
from parathink.logs import log
from parathink.rundir import timings
from parathink.training import rl_checkpoint
from parathink.training.checkpointing import enable_checkpointing
from parathink.training.losses import NORMALISERS, grpo_loss
from parathink.training.master_weights import HALF, MasterAdamW, full_precision_state, to_half_keeping_masters
from parathink.training.rl_parallel import (
    StepGroup,
    add_zero_weight_rows,
    check_launch,
    deepspeed_plugin,
    sampling_policy,
    sync_policy,
    zero_stage,
)
from parathink.training.rl_rollouts import Rollout, StepBatch, assemble, problems_for_step, score, step_metrics
from parathink.training.stage_state import free_accelerator

HALF_DTYPES = ("bfloat16", "bf16", "float16", "fp16")


class TrainingDiverged(ParathinkError, RuntimeError):
    """Too many steps in a row produced a NaN loss or reward. One line and exit 2, as bad configuration: the same
    settings diverge again, so an orchestrator must not retry; the message names the setting to change."""

    exit_code = 2


@dataclass
class Problem:
    id: str
    prompt_ids: list[int]
    answer: Any


# ----------------------------------------------------------------------------------------------------------------
# the recipe


def train(cfg: RLConfig, ctx, init_dir: Path, *, stage: str, grammar: str, model_cfg=None) -> dict[str, float]:
    """Run the configured GRPO-family stage from ``init_dir``; write ``model/`` and ``metrics.jsonl`` to out_dir
    (on rank 0 of a data-parallel launch; the other processes return an empty summary)."""
    procs = distributed.group()  # before accelerate: it reuses the process group this joins
    dtype = model_cfg.get("dtype", "float32") if model_cfg is not None else "float32"
    run = setup(cfg, init_dir, seed=ctx.seed, stage=stage, grammar=grammar, dtype=dtype)
    try:
        return train_from(run, cfg, ctx, stage=stage, grammar=grammar, procs=procs)
    finally:
        if run.rollout is not None:
            run.rollout.close()
        # A stage that follows in this process must find the memory free (stage_state): DeepSpeed's ZeRO optimiser
        # hooks every parameter's gradient accumulator, references the garbage collector cannot see, so its engine
        # outlives the stage unless destroyed.
        free_accelerator(run.accelerator)


def train_from(run: Setup, cfg: RLConfig, ctx, *, stage: str, grammar: str,
               procs: distributed.Group) -> dict[str, float]:
    """``train``'s steps, probes and publication with the models ``setup`` built."""
    work = Path(ctx.work_dir)
    metrics_path = work / "metrics.jsonl"
    start, nan_run = resume(run, work, metrics_path, procs)
    run.sync_rollout()  # vLLM started from the checkpoint on disk: it takes the policy as resumed (or loaded)
    ctx.tracker.log_params({f"{stage}.{k}": v for k, v in cfg.__dict__.items() if k not in ("enabled", "gate")})

    probe, probe_start = start_probe(run, cfg, grammar, work, ctx.seed, resumed=start > 0, procs=procs)
    began = time.perf_counter()  # the safety stop times the steps only, not the probes
    step, cut = start, False
    for step in range(start + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        local = sample_my_share(run, cfg, grammar, step, ctx.seed, procs)
        t1 = time.perf_counter()
        engine_stats = engine_record(run.sampler)
        everyone, batch = gather_step(local, cfg, procs)
        record = step_metrics(batch, run.tokenizer)
        stats, skipped = learn(run, cfg, batch, local, procs)
        record.update(stats)
        t2 = time.perf_counter()
        nan_run = nan_run + 1 if skipped else 0
        record.update({"step": step, "skipped_nan": float(bool(skipped)), "rollout_s": t1 - t0, "update_s": t2 - t1,
                       "tokens_per_s": sum(r.n_tokens for r in everyone) / max(t1 - t0, 1e-9), **engine_stats})
        if procs.is_main:
            log_step(ctx.tracker, metrics_path, record, step)
        if skipped and nan_run >= cfg.max_nan_steps:
            raise TrainingDiverged(f"{stage}: {nan_run} steps in a row skipped (last at step {step}: {skipped}); "
                                   f"stopping (max_nan_steps={cfg.max_nan_steps}). Lower {stage}.lr or check the "
                                   f"rewards.")
        # The safety stop, not a budget: a stage is its `steps` steps, whatever the machine's load. Crossing
        # max_minutes publishes what we have, says so loudly, and the RL gate fails on the missing steps
        # (stages/rl/gate.py). Processes agree, or one would wait forever for the others' next step.
        if step < cfg.steps and procs.any(bool(cfg.max_minutes) and
                                          time.perf_counter() - began >= 60 * cfg.max_minutes):
            cut = True
            break
        if step % cfg.checkpoint_every == 0 and step < cfg.steps:
            rl_checkpoint.save(run.accelerator, work, step, {"nan_run": nan_run})

    procs.barrier()
    if cut and procs.is_main:
        log(f"{stage}: WARNING: the safety stop {stage}.max_minutes={cfg.max_minutes} cut RL short at step {step} "
            f"of {cfg.steps}; the stage's gate fails (raise {stage}.max_minutes, or set it to 0 for no stop)")
    probe_end = run_probe(run.sampler, probe, cfg, grammar, ctx.seed, procs) if probe else []
    masters = deepspeed_masters(run.model, keep=procs.is_main)  # every process: the gather is a collective
    if not procs.is_main:
        return {}
    summary = publish(run, Path(ctx.out_dir), metrics_path, masters)
    summary["planned_steps"] = float(cfg.steps)
    if probe:
        summary.update(probe_summary(probe_start, probe_end, run.reward_fn, grammar, step))
    summary["processes"] = float(procs.size)
    summary["resumed_from_step"] = float(start)  # 0: a fresh start
    return summary


# ----------------------------------------------------------------------------------------------------------------
# setup, resume, publish


@dataclass
class Setup:
    """What ``setup`` builds and the loop uses."""

    accelerator: Any
    model: Any  # the module that trains (wrapped by DDP or DeepSpeed under a multi-process launch)
    policy: Any  # the module the engine samples with and the stage publishes (``rl_parallel.sampling_policy``)
    ref_model: Any  # the frozen start model of the KL term; None when kl_coef is 0
    engine: Any
    optimizer: Any
    scheduler: Any
    tokenizer: Any
    problems: list[Problem]
    reward_fn: Callable
    zero3: bool  # the engine samples with a whole copy of the policy, refreshed by refresh_policy()
    rollout: Any = None  # rollout.backend=vllm: the colocated vLLM engine that samples (parathink.vllm_rollout)

    @property
    def sampler(self):
        """What samples the rollouts and probes: the vLLM engine, or the native one."""
        return self.rollout if self.rollout is not None else self.engine

    def refresh_policy(self) -> None:
        """ZeRO-3: the engine's whole copy takes the training model's weights (nothing to do otherwise)."""
        if self.zero3:
            sync_policy(self.model, self.policy)

    def sync_rollout(self) -> dict[str, float]:
        """vLLM: its engine takes the policy's weights (after an optimiser step); its time and bytes."""
        return {} if self.rollout is None else self.rollout.sync(self.policy)


def setup(cfg: RLConfig, init_dir: Path, *, seed: int, stage: str, grammar: str, dtype: str) -> Setup:
    """The models, the optimiser, the engine, the reward and the problems; a launch or a budget that cannot work
    fails here, before any rollout."""
    from accelerate import Accelerator

    from parathink.engine import Engine
    from parathink.modeling import load_model
    from parathink.modeling.factory import to_dtype
    from parathink.placement.memory_model import engine_kv_bytes
    from parathink.rewards import get_reward

    def whole():  # a frozen model every process holds all of: the reference, and the engine's copy under ZeRO-3
        return load_model(init_dir, dtype=dtype)[0].eval().requires_grad_(False)

    # Loaded before DeepSpeed is configured: under ZeRO-3 transformers builds every model loaded after that
    # partitioned (deepspeed.zero.Init), as it should the training model below.
    ref_model = whole() if cfg.kl_coef > 0 else None
    whole_copy = whole() if zero_stage(cfg) == 3 else None
    plugin = deepspeed_plugin(cfg)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, deepspeed_plugin=plugin,
                              cpu=plugin is None and not torch.cuda.is_available())
    check_launch(accelerator, cfg, stage)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    reward_fn = get_reward(cfg.reward, **cfg.reward_params)
    # Half-precision parameters without DeepSpeed (whose bf16 optimiser keeps its own) train against fp32 masters:
    # loaded in fp32, so that a stage published in full precision continues unrounded (training.master_weights).
    masters_here = plugin is None and str(dtype) in HALF_DTYPES
    model, tokenizer = load_model(init_dir, dtype="float32" if masters_here else dtype)  # ZeRO-3: partitioned
    masters = to_half_keeping_masters(model, to_dtype(dtype)) if masters_here else None
    if cfg.gradient_checkpointing:
        enable_checkpointing(model)
    problems = setup_problems(cfg, tokenizer, seed, stage)  # before any rollout: budget errors first
    optimizer, scheduler = build_optimizer(model, cfg, masters)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if plugin is not None:
        load_deepspeed_masters(model, init_dir)  # a chain of stages keeps the digits bf16 rounds away
    if ref_model is not None:
        ref_model = ref_model.to(accelerator.device)
    policy = sampling_policy(accelerator, model, whole_copy)
    kv_bytes = engine_kv_bytes(cfg, stage, policy.config.to_dict(), dtype, distributed.device_memory(),
                               distributed.group().size)
    engine = Engine(policy, tokenizer, grammar, cfg.mode, cfg.num_paths, min_fork_budget=cfg.min_fork_budget,
                    cuda_graphs=cfg.cuda_graphs, kv_cache_bytes=kv_bytes)
    rollout = start_vllm(cfg, stage, engine, init_dir, seed, dtype, kv_bytes) if cfg.rollout.backend == "vllm" \
        else None
    return Setup(accelerator=accelerator, model=model, policy=policy, ref_model=ref_model, engine=engine,
                 optimizer=optimizer, scheduler=scheduler, tokenizer=tokenizer, problems=problems,
                 reward_fn=reward_fn, zero3=whole_copy is not None, rollout=rollout)


def start_vllm(cfg: RLConfig, stage: str, engine, init_dir: Path, seed: int, dtype: str, kv_bytes: int | None):
    """The colocated vLLM engine of this process (``rollout.backend=vllm``), started from the stage's start
    checkpoint; its KV cache is the native engine's budget (the memory model's, on a GPU) or, on a CPU, the step's
    worst case: every rollout of this process at the full token budget."""
    from parathink.engine.kv_budget import model_kv_bytes_per_token
    from parathink.vllm_rollout import VLLMRollout
    from parathink.vllm_venv import vllm_python

    python = vllm_python(f"{stage}.rollout.backend=vllm")
    procs = distributed.group()
    rows = max(2, min(-(-cfg.prompts_per_step // procs.size) * cfg.group_size, cfg.rollout_batch_size))
    if kv_bytes is None:
        kv_bytes = rows * cfg.token_budget * model_kv_bytes_per_token(engine.model.config, dtype)
    return VLLMRollout.for_engine(engine, init_dir, python=python, seed=seed + procs.rank, dtype=str(dtype),
                       max_model_len=cfg.token_budget, kv_cache_bytes=kv_bytes, max_rows=rows,
                       enforce_eager=cfg.rollout.enforce_eager, prefix_caching=cfg.rollout.prefix_caching,
                       cpu=not torch.cuda.is_available())


def deepspeed_masters(model, keep: bool) -> dict[str, torch.Tensor] | None:
    """Under DeepSpeed with half-precision parameters: the whole fp32 masters (its bf16 optimiser's partitions,
    gathered one parameter at a time; every process must call this), on the CPU where ``keep``; else None."""
    if not hasattr(model, "module") or not hasattr(model, "zero_optimization_stage"):
        return None  # not a DeepSpeed engine
    from deepspeed.utils import safe_get_full_fp32_param

    inner = model.module
    if not any(p.dtype in HALF for p in inner.parameters()):
        return None
    names = {id(p): n for n, p in inner.named_parameters()}
    gathered = {}
    for name, p in inner.named_parameters():
        full = safe_get_full_fp32_param(p)
        if full is not None and keep:
            gathered[name] = full.detach().cpu()
    if not keep:
        return None
    # a tied weight under each of its names, as the state dict has it
    return {key: gathered.get(names.get(id(v), key), v.detach().cpu())
            for key, v in inner.state_dict(keep_vars=True).items()}


def load_deepspeed_masters(model, init_dir: Path) -> int:
    """Under DeepSpeed with half-precision parameters: its fp32 master partitions take the start checkpoint's fp32
    values (a stage published with masters), not their bf16 rounding; returns how many parameters were set."""
    if not hasattr(model, "zero_optimization_stage"):
        return 0
    from deepspeed.utils import safe_set_full_fp32_param
    from safetensors import safe_open

    half = {name: p for name, p in model.module.named_parameters() if p.dtype in HALF}
    done = 0
    for f in sorted(Path(init_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for key in handle.keys():  # the same order on every process
                if key in half and handle.get_slice(key).get_dtype() == "F32":
                    # one tensor read at a time: every process of a node loads this, so the fp32 model is never
                    # held whole in host memory (16 GB for Qwen3-4B, times the GPUs)
                    safe_set_full_fp32_param(half[key], handle.get_tensor(key).to(half[key].device))
                    done += 1
    return done


def setup_problems(cfg: RLConfig, tokenizer, seed: int, stage: str) -> list[Problem]:
    """Draw the train problems and tokenize their prompts; refuse any prompt that leaves no response budget, or is
    longer than ``max_prompt_tokens``."""
    from parathink.data.prompts import build_prompt
    from parathink.data.sources import load_problems

    records = load_problems(cfg.problems, seed=seed)
    # One batched call: the fast tokenizer encodes in Rust, per-prompt calls cost seconds per thousand.
    encoded = tokenizer([build_prompt(r["problem"], tokenizer) for r in records], add_special_tokens=False)["input_ids"]
    out = []
    for rec, ids in zip(records, encoded):
        if len(ids) >= cfg.token_budget:
            raise ConfigError(f"{stage}.token_budget={cfg.token_budget}: smaller than the prompt of problem "
                              f"{rec['id']} ({len(ids)} tokens); raise the budget")
        if cfg.max_prompt_tokens and len(ids) > cfg.max_prompt_tokens:
            raise ConfigError(f"{stage}.max_prompt_tokens={cfg.max_prompt_tokens}: smaller than the prompt of "
                              f"problem {rec['id']} ({len(ids)} tokens); raise it (and token_budget with it)")
        out.append(Problem(id=str(rec["id"]), prompt_ids=ids, answer=rec["answer"]))
    return out


def build_optimizer(model, cfg: RLConfig, masters: list[torch.Tensor] | None = None):
    """AdamW and the warm-up schedule; with ``masters`` (fp32 values of the model's half-precision parameters)
    AdamW steps on those and rounds into the model (``MasterAdamW``), so that an update below bf16's resolution is
    kept."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = {"lr": cfg.lr, "betas": cfg.betas, "weight_decay": cfg.weight_decay}
    opt = MasterAdamW(params, masters, **kwargs) if masters is not None else torch.optim.AdamW(params, **kwargs)
    warm = max(0, cfg.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warm) if warm else 1.0)
    return opt, sched


def resume(run: Setup, work_dir: Path, metrics_path: Path, procs: distributed.Group) -> tuple[int, int]:
    """(the last step done, the current streak of skipped steps) from the latest checkpoint in ``work_dir``;
    (0, 0) for a fresh start. Metrics logged after that checkpoint are dropped: those steps are redone, identically."""
    ckpt = rl_checkpoint.latest(work_dir)
    if ckpt is None:
        if procs.is_main:
            metrics_path.unlink(missing_ok=True)
            _timings_path(metrics_path).unlink(missing_ok=True)
        return 0, 0
    state = rl_checkpoint.load(run.accelerator, ckpt)
    start = int(state["step"])
    run.refresh_policy()  # ZeRO-3: the engine's copy takes the checkpoint's weights
    if procs.is_main:
        _truncate_metrics(metrics_path, start)
    return start, int(state.get("nan_run", 0))


def publish(run: Setup, out_dir: Path, metrics_path: Path, masters: dict | None = None) -> dict[str, float]:
    """The trained policy, the step log and the steps' times into the stage's output (rank 0); the summary of the
    steps."""
    from parathink.modeling import save_model

    # Whole on rank 0 under ZeRO-3 too (the synced copy); with masters, their fp32 values, not the rounded weights.
    full = masters if masters is not None else full_precision_state(run.model, run.optimizer)
    save_model(run.policy, run.tokenizer, out_dir / "model", state_dict=full)
    if metrics_path.exists():
        (out_dir / "metrics.jsonl").write_text(metrics_path.read_text(encoding="utf-8"), encoding="utf-8")
    timed = _read_metrics(_timings_path(metrics_path))
    timings.write(out_dir, steps=timed)
    return summarise(_read_metrics(metrics_path), timed=timed)


# ----------------------------------------------------------------------------------------------------------------
# one step: sample, score, learn


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7_919) % (2**31 - 1)


@torch.no_grad()
def sample_step(engine, problems: list[Problem], cfg: RLConfig, reward_fn, grammar: str, step: int,
                seed: int, stream: int = 0) -> list[Rollout]:
    """Sample ``group_size`` rollouts for each of ``problems`` in one batched engine call; grade and reward them.

    The response budget is what ``token_budget`` leaves after the call's longest prompt, at most
    ``max_response_tokens`` (``RLConfig.response_tokens``), the same for every row of the call. The sampling seed
    is a function of (seed, step, stream): a resumed run samples what the first would have, and each process of a
    data-parallel launch (``stream`` = its rank) draws its own numbers.
    """
    from parathink.engine import SamplingConfig

    longest = max(len(p.prompt_ids) for p in problems)
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.response_tokens(longest),
                              seed=(step_seed(seed, step) + 7_368_787 * stream) % (2**31 - 1),
                              batch_size=cfg.rollout_batch_size,
                              repetition_penalty_in_paths=cfg.repetition_penalty_in_paths)
    samples = engine.generate([p.prompt_ids for p in problems], sampling, num_samples=cfg.group_size)
    return [score(s.prompt_index, s, s.text, problems[s.prompt_index].answer, grammar, reward_fn, step)
            for s in samples]


def sample_my_share(run: Setup, cfg: RLConfig, grammar: str, step: int, seed: int,
                    procs: distributed.Group) -> list[Rollout]:
    """This process's share of the step's problems, sampled and scored; problem i of the step is group i."""
    chosen = problems_for_step(len(run.problems), cfg.prompts_per_step, step, seed)
    mine = chosen[procs.rank::procs.size]
    local = sample_step(run.sampler, [run.problems[i] for i in mine], cfg, run.reward_fn, grammar, step, seed,
                        stream=procs.rank)
    for r in local:
        r.group = r.group * procs.size + procs.rank
    return local


def gather_step(local: list[Rollout], cfg: RLConfig, procs: distributed.Group) -> tuple[list[Rollout], StepBatch]:
    """Every process's rollouts (scores only; each keeps its own samples) and the whole step's advantages and
    drops, so that they are the same on every process."""
    gathered = procs.gather([dataclasses.replace(r, sample=None) for r in local] if procs.size > 1 else local)
    everyone = [r for k, part in enumerate(gathered) for r in (local if k == procs.rank else part)]
    return everyone, assemble(everyone, cfg.group_size, cfg.advantage, cfg.drop_zero_variance, cfg.drop_invalid_format)


def learn(run: Setup, cfg: RLConfig, batch: StepBatch, local: list[Rollout],
          procs: distributed.Group) -> tuple[dict[str, float], str]:
    """The update on this process's kept rollouts: (its statistics, why the step was skipped or '')."""
    if batch.nan_reward:
        return {}, "NaN reward"
    if not batch.rollouts:
        return {}, ""
    mine = [r for r in batch.rollouts if r.sample is not None]  # the others' are on their processes
    stats, skipped = {}, ""
    try:
        stats = update(run.accelerator, run.model, run.ref_model, run.engine, run.optimizer, run.scheduler,
                       StepBatch(rollouts=mine, all_rollouts=local), cfg, procs)
    except FloatingPointError as e:
        skipped = f"NaN loss ({e})"
    run.refresh_policy()  # ZeRO-3: the engine's copy takes the step's update
    stats.update(run.sync_rollout())  # vLLM: its engine takes it too
    return stats, skipped


# ----------------------------------------------------------------------------------------------------------------
# the update (step 5)


def update(accelerator, model, ref_model, engine, optimizer, scheduler, batch: StepBatch,
           cfg: RLConfig, procs: distributed.Group | None = None) -> dict[str, float]:
    """``updates_per_step`` optimiser steps on the step's kept rollouts; returns loss statistics.

    ``batch.rollouts`` are this process's kept rollouts; under a data-parallel launch (``procs``) the normaliser
    and the statistics are the whole step's, and the gradient DDP or DeepSpeed averages is the whole step's.
    Raises FloatingPointError (after zeroing the gradients, on every process) when a loss or the gradient is not
    finite; under DeepSpeed a non-finite loss raises TrainingDiverged before the optimiser step instead.
    """
    group = StepGroup(accelerator, procs or distributed.Group())
    # Micro-batches of similar length: each is padded to its longest row, so sorting by length cuts the padded
    # work. The loss is a sum over rollouts with a global normaliser, so the order changes nothing but float
    # summation order.
    rollouts = sorted(batch.rollouts, key=lambda r: len(r.sample.prompt_ids) + len(r.sample.response_ids))
    device = accelerator.device
    # The engine's log-probs and loss masks, zero-padded (padding is masked out of every sum).
    old = _pad([torch.as_tensor(r.sample.logprobs, dtype=torch.float32) for r in rollouts]).to(device)  # [B, T]
    mask = _pad([torch.as_tensor(r.sample.loss_mask, dtype=torch.float32) for r in rollouts]).to(device)  # [B, T]
    adv = torch.tensor([r.advantage for r in rollouts], dtype=torch.float32, device=device)  # [B]
    # Whole-step sums in one exchange: kept tokens, the loss's normaliser, and -sum(log pi) for the entropy.
    kept_tokens, normaliser, neg_logp = group.sums(
        mask.sum(), NORMALISERS[cfg.loss_agg](mask) if rollouts else 0.0, -(old * mask).sum())
    normaliser = max(1.0, normaliser)
    ref = None if ref_model is None else reference_logprobs(engine, ref_model, rollouts, old, cfg.micro_batch_size)
    # A rollout with zero advantage (its whole group scored the same) has zero policy loss and zero gradient under
    # every policy loss here. Without a KL term it is left out of the forward/backward; the normaliser above still
    # counts its tokens, so the gradient is the full batch's.
    active = [k for k, r in enumerate(rollouts) if r.advantage != 0.0 or ref is not None]
    # Entropy as the Monte-Carlo estimate -E[log pi(token)] over the sampled tokens (exact in expectation when
    # sampling at T=1, top_p=1): computing it from the logits under autograd doubled the update's time.
    entropy = neg_logp / max(1.0, kept_tokens)
    batches = micro_batches(active, [len(r.sample.prompt_ids) + len(r.sample.response_ids) for r in rollouts],
                            cfg.micro_batch_size, cfg.micro_batch_tokens)
    rollouts, (old, mask, adv, ref), batches = add_zero_weight_rows(
        rollouts, (old, mask, adv, ref), batches, group.passes(len(batches)), batch.all_rollouts)
    gap, is_weights = {"old_logprob_drift": float("nan")}, None
    if cfg.recompute_old_logprobs and group.any(bool(active)):
        sampled = old.clone()  # the rollout engine's log-probs, before the training forward's replace them
        recompute_old_logprobs(engine, model, rollouts, batches, old, cfg.logprob_chunk_tokens)
        gap = logprob_gap(old, sampled, mask, active, group, cfg.rollout.gap_threshold)
        if cfg.rollout.backend == "vllm" and cfg.rollout.tis_cap > 0:
            is_weights, gap["tis_weight_mean"] = truncated_is_weights(old, sampled, mask, active, group,
                                                                      cfg.rollout.tis_cap)
    model.train()
    totals = policy_passes(cfg, group, model, engine, optimizer, scheduler, rollouts, batches,
                           old=old, mask=mask, adv=adv, ref=ref, normaliser=normaliser, is_weights=is_weights)
    model.eval()
    n = cfg.updates_per_step
    tok = max(1.0, n * kept_tokens)  # every pass counts every kept token, the inactive ones too
    loss, clipped, kl = group.sums(totals["loss"], totals["clipped"], totals["kl"])
    return {"loss": loss / n, "clip_frac": clipped / tok, "entropy": entropy,
            "kl": kl / tok if ref_model is not None else float("nan"),
            "grad_norm": totals["grad_norm"] / n, "lr": scheduler.get_last_lr()[0], **gap}


def policy_passes(cfg: RLConfig, group: StepGroup, model, engine, optimizer, scheduler, rollouts: list[Rollout],
                  batches: list[list[int]], *, old: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor,
                  ref: torch.Tensor | None, normaliser: float, is_weights: torch.Tensor | None = None,
                  ) -> dict[str, float]:
    """``updates_per_step`` passes over the micro-batches ``batches`` (rows of ``old``/``mask``/``ref``/
    ``is_weights`` [B, T] and ``adv`` [B]), one optimiser step each; the summed loss statistics of this process."""
    spec = cfg.loss_spec
    device = group.accelerator.device
    totals = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "grad_norm": 0.0}
    for _ in range(cfg.updates_per_step):
        bad = False
        for k, index in enumerate(batches):
            part, samples = torch.tensor(index, device=device), [rollouts[i].sample for i in index]
            with group.micro_step(model, last=k == len(batches) - 1):
                logp = policy_logprobs(engine, model, samples, cfg.logprob_chunk_tokens)  # [b, t]
                t = logp.shape[1]
                loss, stats = grpo_loss(spec, logp, old[part, :t], adv[part], mask[part, :t], normaliser,
                                        None if ref is None else ref[part, :t],
                                        None if is_weights is None else is_weights[part, :t])
                bad = bad or not bool(torch.isfinite(loss))
                if group.deepspeed and group.any(bad):
                    # DeepSpeed steps inside the last backward and has already reduced the earlier ones: nothing
                    # can be skipped cleanly, so stop before that step (the checkpoint is intact).
                    raise TrainingDiverged("loss is not finite under DeepSpeed; stopping before the optimiser step")
                group.backward(loss)
            totals["loss"] += loss.item()
            totals["clipped"] += stats["clipped"].item()
            totals["kl"] += stats.get("kl", torch.zeros(())).item()
        if group.any(bad):  # every process stops here together, whichever one saw it
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError("loss is not finite")
        totals["grad_norm"] += optimiser_step(cfg, group, model, optimizer, scheduler)
    return totals


def optimiser_step(cfg: RLConfig, group: StepGroup, model, optimizer, scheduler) -> float:
    """Clip, step, zero the gradients; returns the norm before clipping (0 when clipping is off)."""
    group.fill_missing_grads(model)
    norm = group.accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip > 0 else None
    if norm is not None and not torch.isfinite(torch.as_tensor(norm)):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(f"gradient norm is {float(norm)}")
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm) if norm is not None else 0.0


def policy_logprobs(engine, model, samples: list[Any], chunk_tokens: int = 1024) -> torch.Tensor:
    """Per-token log-probs [B, T] of the samples' response tokens under ``model`` (zero-padded, with grad),
    recomputed by the engine's own function under the layout each sample was generated with, ``chunk_tokens``
    response tokens of logits at a time."""
    from parathink.engine import recompute_logprobs

    return recompute_logprobs(model, engine, samples, with_entropy=False, chunk_tokens=chunk_tokens)[0]


@torch.no_grad()
def reference_logprobs(engine, ref_model, rollouts: list[Rollout], like: torch.Tensor,
                       micro_batch_size: int) -> torch.Tensor:
    """The frozen reference model's log-probs of the rollouts, [B, T] like ``like``, for the KL term."""
    ref = torch.zeros_like(like)  # [B, T]
    for part in chunks(list(range(len(rollouts))), micro_batch_size):
        logp = policy_logprobs(engine, ref_model, [rollouts[k].sample for k in part])  # [b, t]
        ref[torch.tensor(part, device=like.device), :logp.shape[1]] = logp
    return ref


@torch.no_grad()
def recompute_old_logprobs(engine, model, rollouts: list[Rollout], batches: list[list[int]], old: torch.Tensor,
                           chunk_tokens: int = 1024) -> None:
    """Overwrite ``old`` [B, T] with the training forward's own log-probs, on the very micro-batches the update
    runs, so that the first pass starts at ratio 1 whatever engine and precision sampled."""
    for index in batches:
        logp = policy_logprobs(engine, model, [rollouts[i].sample for i in index], chunk_tokens)  # [b, t]
        old[torch.tensor(index, device=old.device), :logp.shape[1]] = logp.float()


def logprob_gap(trained: torch.Tensor, sampled: torch.Tensor, mask: torch.Tensor, active: list[int],
                group: StepGroup, threshold: float) -> dict[str, float]:
    """The training-inference mismatch over the whole step's kept tokens of active rollouts: the mean absolute gap
    between the training forward's log-probs and the rollout engine's (``old_logprob_drift``, as logged before the
    rollout backends), its largest value, and the share of tokens beyond ``threshold`` nats."""
    kept = mask[active]  # [A, T]
    diff = (trained - sampled)[active].abs() * kept if active else torch.zeros(())
    total, beyond, counted = group.sums(diff.sum(), ((diff > threshold) * kept).sum() if active else 0.0,
                                        kept.sum())
    largest = max(group.procs.gather(float(diff.max()) if active and diff.numel() else 0.0))
    return {"old_logprob_drift": total / max(1.0, counted), "logprob_gap_max": largest,
            "logprob_gap_share": beyond / max(1.0, counted)}


def truncated_is_weights(trained: torch.Tensor, sampled: torch.Tensor, mask: torch.Tensor, active: list[int],
                         group: StepGroup, cap: float) -> tuple[torch.Tensor, float]:
    """Per-token weights min(pi_train / pi_rollout, cap) [B, T] of tokens another engine sampled (truncated
    importance sampling), and their mean over the step's kept tokens of active rollouts."""
    weights = torch.exp(trained - sampled).clamp(max=cap) * mask  # [B, T]
    kept = mask[active]
    total, counted = group.sums(weights[active].sum() if active else 0.0, kept.sum())
    return weights, total / max(1.0, counted)


def chunks(index: list[int], size: int) -> list[list[int]]:
    return [index[i:i + size] for i in range(0, len(index), size)]


def micro_batches(index: list[int], lengths: list[int], size: int, tokens: int = 0) -> list[list[int]]:
    """``index`` (rows in ascending length order) cut into micro-batches of at most ``size`` rows and, when
    ``tokens`` > 0, at most ``tokens`` padded tokens (rows x the longest row's length); a row longer than
    ``tokens`` goes alone. Sorted rows make the padding small and each batch's longest row its last."""
    out: list[list[int]] = []
    for i in index:
        if out and len(out[-1]) < size and (not tokens or (len(out[-1]) + 1) * lengths[i] <= tokens):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _pad(rows: list[torch.Tensor]) -> torch.Tensor:
    if not rows:  # a process of a data-parallel step may keep none of its rollouts
        return torch.zeros(0, 0)
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=0.0)


# ----------------------------------------------------------------------------------------------------------------
# the probe: the start and the final policy on the same problems and draws


def probe_problems(problems: list[Problem], n: int, seed: int) -> list[Problem]:
    """The fixed training problems of the before/after probe: a seeded draw, the same on a resumed run."""
    import random

    drawn = random.Random(f"probe:{seed}").sample(range(len(problems)), min(n, len(problems)))
    return [problems[i] for i in sorted(drawn)]


def start_probe(run: Setup, cfg: RLConfig, grammar: str, work_dir: Path, seed: int, *, resumed: bool,
                procs: distributed.Group) -> tuple[list[Problem], list[dict]]:
    """The probe's problems and the start policy's rollouts on them (none when ``probe_prompts`` is 0). Kept in the
    work dir: a resumed run no longer has the start policy in memory."""
    if not cfg.probe_prompts:
        return [], []
    probe = probe_problems(run.problems, cfg.probe_prompts, seed)
    path = work_dir / "probe_start.json"
    if procs.broadcast(path.exists() and resumed):
        return probe, (json.loads(path.read_text(encoding="utf-8")) if procs.is_main else [])
    rows = run_probe(run.sampler, probe, cfg, grammar, seed, procs)
    if procs.is_main:
        storage.write_text(path, json.dumps(rows))
    return probe, rows


def run_probe(engine, problems: list[Problem], cfg: RLConfig, grammar: str, seed: int,
              procs: distributed.Group | None = None) -> list[dict]:
    """Sample the probe with the current policy: one fixed sampling seed, so the start and the final policy are
    compared on the same problems and the same random draws (a paired comparison). Keeps text and verdict only:
    rewards are computed at the end, all at one step of the schedule. Each process samples its share; every
    process gets all of it."""
    procs = procs or distributed.Group()
    rollouts = sample_step(engine, problems[procs.rank::procs.size], cfg, lambda trace, correct, step: 0.0, grammar,
                           0, seed, stream=procs.rank)
    return [row for part in procs.gather([{"text": r.text, "correct": r.correct} for r in rollouts]) for row in part]


def probe_summary(start: list[dict], end: list[dict], reward_fn, grammar: str, step: int) -> dict[str, float]:
    """Mean reward (at ``step`` of the schedule) and accuracy of the probe's rollouts before and after."""
    from parathink.formats import parse

    def stats(rows: list[dict]) -> tuple[float, float]:
        rewards = [float(reward_fn(parse(r["text"], grammar), r["correct"], step)) for r in rows]
        return sum(rewards) / len(rows), sum(r["correct"] for r in rows) / len(rows)

    (r0, a0), (r1, a1) = stats(start), stats(end)
    return {"probe_n": float(len(start)), "probe_reward_start": r0, "probe_reward_end": r1,
            "probe_accuracy_start": a0, "probe_accuracy_end": a1}


# ----------------------------------------------------------------------------------------------------------------
# the step log


# A step's wall-clock figures: to the tracker with the rest, but kept out of metrics.jsonl (hashed with the output)
# in a file of their own, published as the ``steps`` of ``_timings.json`` (parathink.rundir.timings).
# How the engine held the step's rollouts (its KV budget's peak, preemptions and recomputed tokens): what the machine
# did, not what was learnt (a bounded cache samples the same tokens), so kept out of metrics.jsonl with the times.
ENGINE_STATS = {"peak_kv_bytes": "kv_peak_gib", "preemptions": "kv_preemptions", "recomputed_tokens": "kv_recomputed"}
# vLLM's weight sync after each optimiser step (write, load, both) is wall-clock too.
WEIGHT_SYNC = ("weight_sync_s", "weight_sync_write_s", "weight_sync_load_s")
STEP_TIMINGS = ("rollout_s", "update_s", "tokens_per_s", *ENGINE_STATS.values(), *WEIGHT_SYNC)


def engine_record(engine) -> dict[str, float]:
    stats = getattr(engine, "stats", None) or {}
    out = {name: float(stats[key]) for key, name in ENGINE_STATS.items() if key in stats}
    if "kv_peak_gib" in out:
        out["kv_peak_gib"] /= 2**30
    return out


def _timings_path(metrics_path: Path) -> Path:
    return metrics_path.with_name("timings.jsonl")


def log_step(tracker, metrics_path: Path, record: dict, step: int) -> None:
    """One step's metrics to the tracker, and to the work dir's metrics.jsonl and timings.jsonl (what a resumed run
    keeps): the same config and seed write the same metrics.jsonl, however long the steps took."""
    tracker.log_metrics(record, step=step)
    content, timed = timings.split(record, STEP_TIMINGS)
    for path, row in ((metrics_path, content), (_timings_path(metrics_path), {"step": step, **timed})):
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(_jsonable(row)) + "\n")


def _jsonable(record: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    # The one JSONL reader: a damaged line is one `file:line: why` (exit 2), not a traceback.
    return [row for _, row in jsonl.read(path)]


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop lines logged after the checkpoint we resume from (the steps will be redone identically), in the step log
    and in its times."""
    for log_path in (path, _timings_path(path)):
        rows = [r for r in _read_metrics(log_path) if r["step"] <= last_step]
        log_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def summarise(rows: list[dict], window: int = 10, timed: list[dict] | None = None) -> dict[str, float]:
    """The stage's returned metrics: first and last ``window`` steps' reward and accuracy, totals (``seconds`` from
    the steps' times, ``timed``)."""
    def mean(key: str, part: list[dict]) -> float:
        vals = [r[key] for r in part if r.get(key) is not None]
        return float(sum(vals) / len(vals)) if vals else float("nan")

    if not rows:
        return {}
    head, tail = rows[:window], rows[-window:]
    return {
        "steps": float(len(rows)),
        "reward_first": mean("reward_mean", head), "reward_last": mean("reward_mean", tail),
        "accuracy_first": mean("accuracy", head), "accuracy_last": mean("accuracy", tail),
        "parallel_rate_last": mean("parallel_rate", tail),
        "relative_position_last": mean("relative_position", tail),
        "skipped_nan_steps": float(sum(r.get("skipped_nan", 0) for r in rows)),
        "seconds": float(sum(r.get("rollout_s", 0.0) + r.get("update_s", 0.0) for r in timed or [])),
    }

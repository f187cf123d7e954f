"""The GRPO family in one loop: rl_easy, rl_hard, rl_scaffold and grpo_baseline differ only in config.

Per step (Parallel-R1 §3.3; DeepSeekMath §4.1 for GRPO):
1. draw ``prompts_per_step`` problems (a pure function of seed and step, so a resumed run draws the same);
2. sample ``group_size`` rollouts per problem with ``parathink.engine`` in the configured mode: causal (Seen,
   one stream) or structured (paths forked as rows sharing the prefix's KV cache, Unseen layout);
3. grade, parse and reward them with the step's reward schedule (``parathink.rewards``);
4. group-relative advantages; PAPO / DAPO drops (``rl_rollouts.assemble``);
5. recompute log-probs under the *same* layout the engine sampled with, and take ``updates_per_step``
   optimiser steps on the clipped (GRPO) or strict on-policy (PAPO) loss;
6. log, checkpoint.

Where this departs from the papers, and why:
- No refill after DAPO's zero-variance drop: the step trains on fewer rollouts instead of sampling more (a
  bounded step time matters more on 2 cores than a constant batch).
- The old log-probs are the engine's by default, not a second forward: the engine is tested to report what the
  training forward recomputes (<= 1e-4 in fp32), so with one update per step the ratio is 1 and clipping is
  inactive, as in a strictly on-policy run. Clipping acts from the second pass on (``updates_per_step`` > 1).
  In bf16 the two differ (~6e-3 nats per token on an H200): ``old_logprobs=recompute`` then pays one no-grad
  forward so that the ratio starts at 1.
- The reference model (KL) is loaded only when ``kl_coef`` > 0; Parallel-R1's public runs use no KL. Without
  it the logged ``kl`` is empty (NaN), not a made-up figure.
- ``entropy`` is logged as -mean log pi(token) over the sampled tokens (unbiased at T=1, top_p=1), not from the
  full distribution: that cost as much as the rest of the update on the tiny model.

accelerate sits underneath (device placement, mixed precision, checkpoint state, DDP, DeepSpeed). Under a
multi-process launch (torchrun or ``accelerate launch``) the loop is data-parallel: each process samples its share
of the step's problems with its own sampling stream; the scores of every process are gathered, so advantages,
drops and metrics are those of the whole step; the loss is normalised by the whole step's token count; and every
process runs the backward passes the collectives expect (a process short of them runs zero-weight rows), so the
averaged gradient is the whole step's. ``<stage>.deepspeed`` adds ZeRO-1/2 (gradients and optimiser state
sharded, parameters whole for the engine) or ZeRO-3 (parameters sharded too: the engine samples with a full copy
that ``sync_policy`` refreshes once per step, see ``sampling_policy``). FSDP is refused (``check_launch`` says why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from parathink import distributed, storage
from parathink.training import rl_checkpoint
from parathink.training.losses import NORMALISERS, grpo_loss
from parathink.training.rl_config import RLConfig
from parathink.training.rl_rollouts import Rollout, StepBatch, assemble, problems_for_step, score, step_metrics


class TrainingDiverged(RuntimeError):
    """Too many steps in a row produced a NaN loss or reward."""


@dataclass
class Problem:
    id: str
    prompt_ids: list[int]
    answer: Any


# ----------------------------------------------------------------------------------------------------------------
# setup


def setup_problems(cfg: RLConfig, tokenizer, seed: int, stage: str) -> list[Problem]:
    """Draw the train problems and tokenize their prompts; refuse any prompt that leaves no response budget."""
    from parathink.data.prompts import build_prompt
    from parathink.data.sources import load_problems

    records = load_problems(cfg.problems, seed=seed)
    # One batched call: the fast tokenizer encodes in Rust, per-prompt calls cost seconds per thousand.
    encoded = tokenizer([build_prompt(r["problem"], tokenizer) for r in records], add_special_tokens=False)["input_ids"]
    out = []
    for rec, ids in zip(records, encoded):
        if len(ids) >= cfg.token_budget:
            from parathink.stages.context import ConfigError

            raise ConfigError(f"{stage}.token_budget={cfg.token_budget}: smaller than the prompt of problem "
                             f"{rec['id']} ({len(ids)} tokens); raise the budget")
        out.append(Problem(id=str(rec["id"]), prompt_ids=ids, answer=rec["answer"]))
    return out


def build_optimizer(model, cfg: RLConfig):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            betas=cfg.betas, weight_decay=cfg.weight_decay)
    warm = max(0, cfg.warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warm) if warm else 1.0)
    return opt, sched


# ----------------------------------------------------------------------------------------------------------------
# one step


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7_919) % (2**31 - 1)


@torch.no_grad()
def sample_step(engine, problems: list[Problem], cfg: RLConfig, reward_fn, grammar: str, step: int,
                seed: int, stream: int = 0) -> list[Rollout]:
    """Sample ``group_size`` rollouts for each of ``problems`` in one batched engine call; grade and reward them.

    The response budget is what ``token_budget`` leaves after the step's longest prompt, the same for every row
    of the call. The sampling seed is a function of (seed, step, stream): a resumed run samples what the first
    would have, and each process of a data-parallel launch (``stream`` = its rank) draws its own numbers.
    """
    from parathink.engine import SamplingConfig

    longest = max(len(p.prompt_ids) for p in problems)
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.token_budget - longest,
                              seed=(step_seed(seed, step) + 7_368_787 * stream) % (2**31 - 1),
                              batch_size=cfg.rollout_batch_size,
                              repetition_penalty_in_paths=cfg.repetition_penalty_in_paths)
    samples = engine.generate([p.prompt_ids for p in problems], sampling, num_samples=cfg.group_size)
    return [score(s.prompt_index, s, s.text, problems[s.prompt_index].answer, grammar, reward_fn, step)
            for s in samples]


def probe_problems(problems: list[Problem], n: int, seed: int) -> list[Problem]:
    """The fixed training problems of the before/after probe: a seeded draw, the same on a resumed run."""
    import random

    return [problems[i] for i in sorted(random.Random(f"probe:{seed}").sample(range(len(problems)), min(n, len(problems))))]


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


def policy_logprobs(engine, model, samples: list[Any]) -> torch.Tensor:
    """Per-token log-probs [B, T] of the samples' response tokens under ``model`` (zero-padded, with grad),
    recomputed by the engine's own function under the layout each sample was generated with."""
    from parathink.engine import recompute_logprobs

    return recompute_logprobs(model, engine, samples, with_entropy=False)[0]


def update(accelerator, model, ref_model, engine, optimizer, scheduler, batch: StepBatch,
           cfg: RLConfig, procs: distributed.Group | None = None) -> dict[str, float]:
    """``updates_per_step`` optimiser steps on the step's kept rollouts; returns loss statistics.

    ``batch.rollouts`` are this process's kept rollouts; under a data-parallel launch (``procs``) the normaliser
    and the statistics are the whole step's, and the gradient DDP or DeepSpeed averages is the whole step's.
    Raises FloatingPointError (after zeroing the gradients, on every process) when a loss or the gradient is not
    finite; under DeepSpeed a non-finite loss raises TrainingDiverged before the optimiser step instead.
    """
    from accelerate.utils import DistributedType

    procs = procs or distributed.Group()
    deepspeed = accelerator.distributed_type == DistributedType.DEEPSPEED
    # Micro-batches of similar length: each is padded to its longest row, so sorting by length cuts the padded
    # work (1.4x faster on the tiny hard stages). The loss is a sum over rollouts with a global normaliser, so
    # the order changes nothing but float summation order.
    rollouts = sorted(batch.rollouts, key=lambda r: len(r.sample.prompt_ids) + len(r.sample.response_ids))
    spec = cfg.loss_spec
    totals = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "grad_norm": 0.0}
    # Old log-probs and loss masks are the engine's (padded with zeros: masked out of every sum).
    device = accelerator.device
    old = _pad([torch.as_tensor(r.sample.logprobs, dtype=torch.float32) for r in rollouts]).to(device)  # [B, T]
    mask = _pad([torch.as_tensor(r.sample.loss_mask, dtype=torch.float32) for r in rollouts]).to(device)  # [B, T]
    adv = torch.tensor([r.advantage for r in rollouts], dtype=torch.float32, device=device)  # [B]
    # Sums over every process in one exchange: kept tokens, the loss's normaliser, and -sum(log pi) for entropy.
    kept_tokens, normaliser, neg_logp = procs.sums(
        mask.sum(), NORMALISERS[cfg.loss_agg](mask) if rollouts else 0.0, -(old * mask).sum())
    normaliser = max(1.0, normaliser)

    def chunks(index: list[int]) -> list[list[int]]:
        return [index[i:i + cfg.micro_batch_size] for i in range(0, len(index), cfg.micro_batch_size)]

    def micro_batches(index: list[int]):
        """(positions as a tensor, their samples) for each no-grad micro-batch of the rollouts at ``index``."""
        for part in chunks(index):
            yield torch.tensor(part, device=device), [rollouts[k].sample for k in part]

    ref = None
    if ref_model is not None:
        ref = torch.zeros_like(old)  # [B, T]
        with torch.no_grad():
            for part, samples in micro_batches(list(range(len(rollouts)))):
                logp = policy_logprobs(engine, ref_model, samples)  # [b, t]
                ref[part, :logp.shape[1]] = logp
    # A rollout with zero advantage (its whole group scored the same: 50-75% of hard groups on the tiny model)
    # has zero policy loss and zero gradient under every policy loss here. Without a KL term it is left out of
    # the forward/backward; the normaliser above still counts its tokens, so the gradient is the full batch's.
    active = [k for k, r in enumerate(rollouts) if r.advantage != 0.0 or ref is not None]
    # Entropy as the Monte-Carlo estimate -E[log pi(token)] over the sampled tokens (exact in expectation when
    # sampling at T=1, top_p=1): computing it from the logits under autograd doubled the update's time.
    entropy = neg_logp / max(1.0, kept_tokens)
    # Every process must run as many passes as the collectives inside them expect: under DDP at least one backward
    # (the pass's last all-reduces), under DeepSpeed exactly as many as the busiest process (each ZeRO backward
    # reduce-scatters; each ZeRO-3 forward, with or without grad, gathers the parameters). A process short of them
    # runs a rollout it sampled with its loss mask zeroed: zero loss, zero gradient, the same collectives.
    batches = chunks(active)
    need = max(procs.gather(len(batches))) if deepspeed else (1 if procs.size > 1 else 0)
    if len(batches) < need:
        rollouts = rollouts + [dataclasses.replace(batch.all_rollouts[0], advantage=0.0)]
        width = max(old.shape[1], len(rollouts[-1].sample.response_ids))
        old, mask = _zero_row(old, width), _zero_row(mask, width)
        ref = None if ref is None else _zero_row(ref, width)
        adv = torch.cat([adv, adv.new_zeros(1)])
        batches += [[len(rollouts) - 1]] * (need - len(batches))
    drift = float("nan")
    if cfg.old_logprobs == "recompute" and procs.any(bool(active)):
        # The ratio's denominator from the training forward itself, on the very micro-batches the update runs, so
        # that the first pass starts at ratio 1 whatever precision the engine sampled in; the mean gap to the
        # engine's log-probs is logged (the training-inference mismatch).
        engine_old = old.clone()
        with torch.no_grad():
            for index in batches:
                logp = policy_logprobs(engine, model, [rollouts[i].sample for i in index])  # [b, t]
                old[torch.tensor(index, device=device), :logp.shape[1]] = logp.float()
        kept = mask[active]
        gap, counted = procs.sums(((old - engine_old)[active].abs() * kept).sum() if active else 0.0, kept.sum())
        drift = gap / max(1.0, counted)
    model.train()
    for _ in range(cfg.updates_per_step):
        bad = False
        for k, index in enumerate(batches):
            part, samples = torch.tensor(index, device=device), [rollouts[i].sample for i in index]
            with _micro_step(accelerator, model, last=k == len(batches) - 1):
                logp = policy_logprobs(engine, model, samples)  # [b, t]
                t = logp.shape[1]
                loss, stats = grpo_loss(spec, logp, old[part, :t], adv[part], mask[part, :t], normaliser,
                                        None if ref is None else ref[part, :t])
                bad = bad or not bool(torch.isfinite(loss))
                if deepspeed and procs.any(bad):
                    # DeepSpeed steps inside the last backward and has already reduced the earlier ones: nothing
                    # can be skipped cleanly, so stop before that step (the checkpoint is intact).
                    raise TrainingDiverged("loss is not finite under DeepSpeed; stopping before the optimiser step")
                # DDP and DeepSpeed average the processes' gradients; each loss is a share of the step's sum.
                accelerator.backward(loss * procs.size)
            totals["loss"] += loss.item()
            totals["clipped"] += stats["clipped"].item()
            totals["kl"] += stats.get("kl", torch.zeros(())).item()
        if procs.any(bad):  # every process stops here together, whichever one saw it
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError("loss is not finite")
        for p in model.parameters():  # a step with no active rollout: a zero gradient, so Adam moves as usual
            if p.requires_grad and p.grad is None and not deepspeed:  # (DeepSpeed has stepped already)
                p.grad = torch.zeros_like(p)
        norm = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip > 0 else None
        if norm is not None and not torch.isfinite(torch.as_tensor(norm)):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"gradient norm is {float(norm)}")
        totals["grad_norm"] += float(norm) if norm is not None else 0.0
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    n = cfg.updates_per_step
    tok = max(1.0, n * kept_tokens)  # every pass counts every kept token, the inactive ones too
    loss, clipped, kl = procs.sums(totals["loss"], totals["clipped"], totals["kl"])
    return {"loss": loss / n, "clip_frac": clipped / tok, "entropy": entropy,
            "kl": kl / tok if ref_model is not None else float("nan"),
            "grad_norm": totals["grad_norm"] / n, "lr": scheduler.get_last_lr()[0], "old_logprob_drift": drift}


def _pad(rows: list[torch.Tensor]) -> torch.Tensor:
    if not rows:  # a process of a data-parallel step may keep none of its rollouts
        return torch.zeros(0, 0)
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=0.0)


def _zero_row(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` [B, T] zero-padded to ``width`` columns, with one more row of zeros: [B + 1, max(T, width)]."""
    out = t.new_zeros(t.shape[0] + 1, max(t.shape[1], width))
    out[:t.shape[0], :t.shape[1]] = t
    return out


@contextlib.contextmanager
def _micro_step(accelerator, model, last: bool):
    """One micro-batch's forward and backward. Only the pass's last synchronises: DDP all-reduces in it (no_sync
    must cover the others' forwards too), DeepSpeed takes it as the accumulation boundary and steps in it."""
    if last:
        yield
        return
    state = accelerator.gradient_state
    state._set_sync_gradients(False)  # what accelerator.backward hands DeepSpeed as the boundary flag
    try:
        with accelerator.no_sync(model):
            yield
    finally:
        state._set_sync_gradients(True)


# ----------------------------------------------------------------------------------------------------------------
# the loop


def deepspeed_plugin(cfg: RLConfig):
    """accelerate's DeepSpeed plugin from ``cfg.deepspeed`` (a JSON file, ZeRO stage 0-3), or None.

    The JSON's batch and clipping values are set from the RL settings: one micro-batch of ``micro_batch_size``
    rollouts per backward and one accumulation step, because the loop marks the step's last backward as the
    boundary itself (an RL step has as many micro-batches as it kept rollouts, not a fixed count).
    """
    if not cfg.deepspeed:
        return None
    from accelerate.utils import DeepSpeedPlugin

    ds = json.loads(Path(cfg.deepspeed).read_text(encoding="utf-8"))
    ds.pop("train_batch_size", None)
    ds.update({"train_micro_batch_size_per_gpu": cfg.micro_batch_size, "gradient_accumulation_steps": 1,
               "gradient_clipping": max(0.0, cfg.grad_clip)})
    for precision in ("bf16", "fp16"):
        ds[precision] = {**ds.get(precision, {}), "enabled": cfg.mixed_precision == precision}
    zero = ds.setdefault("zero_optimization", {})
    if zero.get("reduce_bucket_size") == "auto":
        zero["reduce_bucket_size"] = int(5e8)
    return DeepSpeedPlugin(hf_ds_config=ds)


def check_launch(accelerator, cfg: RLConfig, stage: str) -> None:
    """Refuse a launch the loop would get wrong, before any rollout.

    DeepSpeed from an accelerate config file bypasses the batch settings ``deepspeed_plugin`` makes. FSDP is
    refused: accelerate turns it on only on accelerators, so that path cannot be tested on the CPU machines this
    project is built on; ZeRO-3 (``hydra_conf/deepspeed/zero3.json``) shards the parameters the same way and is.
    DDP and ZeRO-1/2/3 from ``<stage>.deepspeed`` are what the loop implements; the step's problems are split evenly.
    """
    from accelerate.utils import DistributedType

    from parathink.stages.context import ConfigError

    kind = accelerator.distributed_type
    if kind == DistributedType.FSDP or (kind == DistributedType.DEEPSPEED and not cfg.deepspeed):
        raise ConfigError(f"{stage}: RL stages run under DDP or DeepSpeed ZeRO set by {stage}.deepspeed (ZeRO-3 "
                          f"shards parameters as FSDP does), got {kind.value} from the launcher; launch `parathink "
                          f"stage {stage}` with torchrun or a plain multi-GPU accelerate config")
    processes = distributed.group().size  # not accelerator.num_processes: 1 under DeepSpeed on CPU
    if cfg.prompts_per_step % processes:
        raise ConfigError(f"{stage}.prompts_per_step={cfg.prompts_per_step}: must be a multiple of the "
                          f"{processes} processes, each samples an equal share of the step's problems")


def zero_stage(cfg: RLConfig) -> int:
    """The ZeRO stage ``cfg.deepspeed`` asks for (0 without DeepSpeed)."""
    if not cfg.deepspeed:
        return 0
    return int((json.loads(Path(cfg.deepspeed).read_text(encoding="utf-8")).get("zero_optimization") or {}).get("stage", 0))


def sampling_policy(accelerator, model, whole_copy):
    """The module the engine samples with, and the one the stage publishes.

    Under DDP and ZeRO-1/2 it is the training model itself: every process holds all its parameters, so the engine
    sees each update at once. Under ZeRO-3 a process holds a slice of each parameter; sampling through the
    training model would gather every layer for every decoded token. The engine gets ``whole_copy`` instead (one
    more model's parameters in memory), which ``sync_policy`` refreshes after each optimiser step: one gather
    per step.
    """
    if whole_copy is None:
        return accelerator.unwrap_model(model)
    policy = whole_copy.to(accelerator.device)
    sync_policy(model, policy)
    return policy


@torch.no_grad()
def sync_policy(model, policy) -> None:
    """Copy the ZeRO-3 training model's parameters into the engine's whole copy. One parameter is gathered at a
    time, so at most one extra parameter is whole at once; every process gathers in the same order (each gather
    is a collective)."""
    import deepspeed

    trained = dict(model.module.named_parameters())
    for name, p in policy.named_parameters():
        with deepspeed.zero.GatheredParameters([trained[name]]):
            p.copy_(trained[name])


def train(cfg: RLConfig, ctx, init_dir: Path, *, stage: str, grammar: str, model_cfg=None) -> dict[str, float]:
    """Run the configured GRPO-family stage from ``init_dir``; write ``model/`` and ``metrics.jsonl`` to out_dir
    (on rank 0 of a data-parallel launch; the other processes return an empty summary)."""
    from accelerate import Accelerator

    from parathink.engine import Engine
    from parathink.modeling import load_model, save_model
    from parathink.rewards import get_reward

    procs = distributed.group()  # before accelerate: it reuses the process group this joins
    dtype = model_cfg.get("dtype", "float32") if model_cfg is not None else "float32"

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
    model, tokenizer = load_model(init_dir, dtype=dtype)  # under ZeRO-3 built partitioned
    problems = setup_problems(cfg, tokenizer, ctx.seed, stage)  # before any rollout: budget errors first

    optimizer, scheduler = build_optimizer(model, cfg)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if ref_model is not None:
        ref_model = ref_model.to(accelerator.device)
    policy = sampling_policy(accelerator, model, whole_copy)
    sync = (lambda: sync_policy(model, policy)) if whole_copy is not None else (lambda: None)
    engine = Engine(policy, tokenizer, grammar, cfg.mode, cfg.num_paths, min_fork_budget=cfg.min_fork_budget,
                    cuda_graphs=cfg.cuda_graphs)

    metrics_path = Path(ctx.work_dir) / "metrics.jsonl"
    start, nan_run = 0, 0
    ckpt = rl_checkpoint.latest(Path(ctx.work_dir))
    if ckpt is not None:
        state = rl_checkpoint.load(accelerator, ckpt)
        start, nan_run = int(state["step"]), int(state.get("nan_run", 0))
        sync()  # ZeRO-3: the engine's copy takes the checkpoint's weights
        if procs.is_main:
            _truncate_metrics(metrics_path, start)
    elif metrics_path.exists() and procs.is_main:
        metrics_path.unlink()
    ctx.tracker.log_params({f"{stage}.{k}": v for k, v in cfg.__dict__.items() if k != "extra"})

    began = time.perf_counter()
    probe, probe_start = [], []
    if cfg.probe_prompts:
        # The start policy's probe, kept in the work dir: a resumed run no longer has the start policy in memory.
        probe = probe_problems(problems, cfg.probe_prompts, ctx.seed)
        probe_path = Path(ctx.work_dir) / "probe_start.json"
        if procs.broadcast(probe_path.exists() and ckpt is not None):
            probe_start = json.loads(probe_path.read_text(encoding="utf-8")) if procs.is_main else []
        else:
            probe_start = run_probe(engine, probe, cfg, grammar, ctx.seed, procs)
            if procs.is_main:
                storage.write_text(probe_path, json.dumps(probe_start))
    step = start
    for step in range(start + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        chosen = problems_for_step(len(problems), cfg.prompts_per_step, step, ctx.seed)
        mine = chosen[procs.rank::procs.size]  # this process's share; problem i of the step is group i
        local = sample_step(engine, [problems[i] for i in mine], cfg, reward_fn, grammar, step, ctx.seed,
                            stream=procs.rank)
        for r in local:
            r.group = r.group * procs.size + procs.rank
        t1 = time.perf_counter()
        # Advantages, drops and metrics over the whole step: every process's scores, the samples left behind.
        gathered = procs.gather([dataclasses.replace(r, sample=None) for r in local] if procs.size > 1 else local)
        everyone = [r for k, part in enumerate(gathered) for r in (local if k == procs.rank else part)]
        batch = assemble(everyone, cfg.group_size, cfg.advantage, cfg.drop_zero_variance, cfg.drop_invalid_format)
        record = step_metrics(batch, tokenizer)
        skipped = ""
        if batch.nan_reward:
            skipped = "NaN reward"
        elif batch.rollouts:
            mine_kept = [r for r in batch.rollouts if r.sample is not None]  # the others' are on their processes
            try:
                record.update(update(accelerator, model, ref_model, engine, optimizer, scheduler,
                                     StepBatch(rollouts=mine_kept, all_rollouts=local), cfg, procs))
            except FloatingPointError as e:
                skipped = f"NaN loss ({e})"
            sync()  # ZeRO-3: the engine's copy takes the step's update (a no-op otherwise)
        t2 = time.perf_counter()
        nan_run = nan_run + 1 if skipped else 0
        gen_tokens = sum(r.n_tokens for r in everyone)
        record.update({"step": step, "skipped_nan": float(bool(skipped)), "rollout_s": t1 - t0,
                       "update_s": t2 - t1, "tokens_per_s": gen_tokens / max(t1 - t0, 1e-9)})
        if procs.is_main:
            ctx.tracker.log_metrics(record, step=step)
            with metrics_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(_jsonable(record)) + "\n")
        if skipped and nan_run >= cfg.max_nan_steps:
            raise TrainingDiverged(f"{stage}: {nan_run} steps in a row skipped (last at step {step}: {skipped}); "
                                   f"stopping (max_nan_steps={cfg.max_nan_steps}). Lower {stage}.lr or check the rewards.")
        # The wall-clock cap: publish what we have (the summary's `steps` says how far we got). Processes agree,
        # or one would wait forever for the others' next step.
        if procs.any(bool(cfg.max_minutes) and time.perf_counter() - began >= 60 * cfg.max_minutes):
            break
        if step % cfg.checkpoint_every == 0 and step < cfg.steps:
            rl_checkpoint.save(accelerator, Path(ctx.work_dir), step, {"nan_run": nan_run})

    procs.barrier()
    probe_end = run_probe(engine, probe, cfg, grammar, ctx.seed, procs) if probe else []
    if not procs.is_main:
        return {}
    save_model(policy, tokenizer, Path(ctx.out_dir) / "model")  # whole on rank 0 under ZeRO-3 too (the synced copy)
    if metrics_path.exists():
        (Path(ctx.out_dir) / "metrics.jsonl").write_text(metrics_path.read_text(encoding="utf-8"), encoding="utf-8")
    summary = summarise(_read_metrics(metrics_path))
    if probe:
        summary.update(probe_summary(probe_start, probe_end, reward_fn, grammar, step))
    summary["processes"] = float(procs.size)
    summary["resumed_from_step"] = float(start)  # 0: a fresh start
    return summary


# ----------------------------------------------------------------------------------------------------------------
# bookkeeping


def _jsonable(record: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop lines logged after the checkpoint we resume from (the steps will be redone identically)."""
    rows = [r for r in _read_metrics(path) if r["step"] <= last_step]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def summarise(rows: list[dict], window: int = 10) -> dict[str, float]:
    """The stage's returned metrics: first and last ``window`` steps' reward and accuracy, totals."""
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
        "seconds": float(sum(r["rollout_s"] + r["update_s"] for r in rows)),
    }


# ----------------------------------------------------------------------------------------------------------------
# the stage entry points (parathink/stages/rl_*.py and grpo_baseline.py are one line each around these)


def stage_config(cfg, stage: str) -> RLConfig:
    """The stage's RLConfig; a bad value raises the runner's ConfigError naming ``<stage>.<key>``."""
    from omegaconf import OmegaConf

    from parathink.stages.context import ConfigError

    try:
        return RLConfig.from_cfg(OmegaConf.to_container(cfg[stage], resolve=True), stage)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def run_stage(cfg, ctx, stage: str) -> dict[str, float]:
    """Start from ``<init_from>/model`` and train; the common body of every GRPO-family stage."""
    rl_cfg = stage_config(cfg, stage)
    init_dir = Path(ctx.input(rl_cfg.init_from)) / "model"
    return train(rl_cfg, ctx, init_dir, stage=stage, grammar=str(cfg.format), model_cfg=cfg.get("model"))

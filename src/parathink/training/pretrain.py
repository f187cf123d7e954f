"""Pretraining of the tiny base on sequential worked solutions (the tiny default's stand-in for Qwen3-4B-Base).

A plain loop (AdamW, warm-up then cosine, batch of random examples) rather than a trainer framework: the model
is 1M parameters, the loop must stop on a *greedy accuracy target* as well as on a step or time budget, and it
must resume after a kill from its last checkpoint in the stage's work dir. The batch size, learning rate and
time budget come from calibration runs, and the batch is packed (``pack``) rather than padded because packing
trained more steps, and better ones, in the same time (the figures: docs/findings.md, "From code comments").
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from parathink.data.prompts import build_prompt
from parathink.data.synthetic import generate, worked_solution
from parathink.logs import log
from parathink.tracking.tracker import NullTracker, Tracker
from parathink.training.sampling import accuracy

IGNORE = -100


@dataclass
class Example:
    ids: list[int]  # prompt + response + eos
    n_prompt: int  # tokens before the response


def encode(records: Sequence[dict], tokenizer, response: Callable[[dict], str] = worked_solution) -> list[Example]:
    """Prompt + response + eos per record, tokenised once (prompt tokenised alone to find the boundary)."""
    prompts = [build_prompt(r["problem"], tokenizer) for r in records]
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    r_ids = tokenizer([response(r) for r in records], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [Example(p + r + [eos], len(p)) for p, r in zip(p_ids, r_ids)]


def collate(batch: Sequence[Example], pad_id: int, loss_on: str = "response") -> dict[str, torch.Tensor]:
    """Right-padded input_ids / attention_mask / labels [B, L]; labels ignore padding (and the prompt)."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, e in enumerate(batch):
        n = len(e.ids)
        ids[i, :n] = torch.tensor(e.ids)
        mask[i, :n] = 1
        start = e.n_prompt if loss_on == "response" else 0
        labels[i, start:n] = ids[i, start:n]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def pack(batch: Sequence[Example], pad_id: int, capacity: int, loss_on: str = "response") -> dict[str, torch.Tensor]:
    """Several examples per row, each seeing only itself: padding-free batches with the same loss.

    First-fit decreasing into rows of ``capacity`` tokens; a block-diagonal causal 4-D mask and positions that
    restart at 0 for every example make each example's logits exactly those it has alone, and the token-mean
    loss equals ``collate``'s. Random batches of the tiny corpus are ~35% padding (mean 96 tokens, max ~150),
    so this is more examples per second with the same batch composition (unlike length bucketing, which made
    easy-only and hard-only batches and cost hard accuracy).
    """
    from parathink.modeling.attention import to_4d_mask

    rows: list[list[Example]] = []
    used: list[int] = []
    capacity = max(capacity, max(len(e.ids) for e in batch))  # a longer example gets a row of its own
    for e in sorted(batch, key=lambda e: -len(e.ids)):
        for i, u in enumerate(used):
            if u + len(e.ids) <= capacity:
                rows[i].append(e)
                used[i] += len(e.ids)
                break
        else:
            rows.append([e])
            used.append(len(e.ids))
    width = max(used)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    allowed = torch.zeros((len(rows), width, width), dtype=torch.bool)
    allowed[:, torch.arange(width), torch.arange(width)] = True  # padding attends to itself only
    for i, row in enumerate(rows):
        o = 0
        for e in row:
            n = len(e.ids)
            ids[i, o:o + n] = torch.tensor(e.ids)
            start = o + (e.n_prompt if loss_on == "response" else 0)
            labels[i, start:o + n] = ids[i, start:o + n]
            pos[i, o:o + n] = torch.arange(n)
            allowed[i, o:o + n, o:o + n] = torch.tril(torch.ones(n, n, dtype=torch.bool))
            o += n
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "attention_mask": to_4d_mask(allowed)}


def cosine_lr(step: int, total: int, peak: float, warmup: int, min_ratio: float, time_frac: float = 0.0) -> float:
    """Linear warm-up to ``peak``, then cosine decay to ``peak * min_ratio``.

    The decay follows whichever budget is further spent: steps (``step / total``) or wall-clock time
    (``time_frac``), so a run cut short by ``max_minutes`` on a busy machine still ends at a low learning rate.
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, max((step - warmup) / max(1, total - warmup), time_frac))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def training_examples(cfg, tokenizer, seed: int) -> list[Example]:
    """``train_size`` problems, ``easy_fraction`` of them easy, the rest hard (train split)."""
    n_easy = int(round(cfg.train_size * cfg.easy_fraction))
    records = generate("easy", "train", n_easy, seed) + generate("hard", "train", cfg.train_size - n_easy, seed)
    return encode(records, tokenizer)


def pretrain(model, tokenizer, cfg, *, work_dir: Path, seed: int = 0, tracker: Tracker | None = None,
             progress: bool = False) -> dict[str, float]:
    """Train ``model`` in place until ``cfg.target_greedy_easy``, ``cfg.max_steps`` or ``cfg.max_minutes``."""
    tracker = tracker or NullTracker()
    examples = training_examples(cfg, tokenizer, seed)
    val = generate("easy", "test", cfg.eval_n, seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
    ckpt = Path(work_dir) / "pretrain_state.pt"
    step, elapsed, rng, stop = 0, 0.0, random.Random(seed), ""
    state = _load_state(ckpt)
    if state is not None:  # resume: weights, optimiser, step, time spent and the sampler's state
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, elapsed = state["step"], state["elapsed"]
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        stop = state.get("stop", "")
    bar = _bar(progress, cfg.max_steps, step)
    metrics: dict[str, float] = {}
    model.train()
    t0 = time.perf_counter() - elapsed
    loss = torch.tensor(float("nan"))
    while not stop:
        time_frac = (time.perf_counter() - t0) / 60 / cfg.max_minutes
        lr = cosine_lr(step, cfg.max_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio, time_frac)
        for g in opt.param_groups:
            g["lr"] = lr
        drawn = rng.sample(examples, cfg.batch_size)
        batch = (pack(drawn, tokenizer.pad_token_id, int(cfg.pack_len), cfg.loss_on) if int(cfg.pack_len) > 0
                 else collate(drawn, tokenizer.pad_token_id, cfg.loss_on))
        loss = model(**batch).loss
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        minutes = (time.perf_counter() - t0) / 60
        tracker.log_metrics({"loss": loss.item(), "lr": lr, "grad_norm": gnorm, "minutes": minutes}, step=step)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
        if step % cfg.eval_every == 0 or step >= cfg.max_steps or minutes >= cfg.max_minutes:
            acc, _ = accuracy(model, tokenizer, val, max_new_tokens=cfg.max_new_tokens)
            metrics["greedy_easy_val"] = acc
            tracker.log_metrics({"greedy_easy_val": acc}, step=step)
            if acc >= cfg.target_greedy_easy:
                stop = "target"
        if step >= cfg.max_steps:
            stop = stop or "max_steps"
        elif minutes >= cfg.max_minutes:
            stop = stop or "max_minutes"
        if stop or step % cfg.checkpoint_every == 0:
            _save_state(ckpt, {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                               "elapsed": time.perf_counter() - t0, "rng": rng.getstate(),
                               "torch_rng": torch.get_rng_state(), "stop": stop})
    if bar is not None:
        bar.close()
    model.eval()
    metrics.update({"steps": float(step), "minutes": (time.perf_counter() - t0) / 60, "final_loss": loss.item(),
                    "stopped_at_target": float(stop == "target")})
    return metrics


_STATE_KEYS = ("model", "opt", "step", "elapsed", "rng", "torch_rng")


def greedy_accuracy(model, tokenizer, level: str, n: int, seed: int, max_new_tokens: int) -> float:
    """Greedy accuracy on ``n`` test problems of ``level`` drawn with ``seed``: the base stage's report."""
    return accuracy(model, tokenizer, generate(level, "test", n, seed), max_new_tokens=max_new_tokens)[0]


def _save_state(path: Path, state: dict) -> None:
    """Tensors and plain types only (``weights_only`` loads them back), written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _load_state(path: Path) -> dict | None:
    """The checkpoint to resume from, loaded as data only: ``weights_only=True`` runs no code from the file, so
    whoever can write the scratch folder cannot run code here. One that does not load (torn, or holding objects
    that would run code) is ignored with a warning naming it, and training starts over."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=True)
        if isinstance(state, dict) and all(k in state for k in _STATE_KEYS):
            return state
        why = "not a pretraining checkpoint"
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError... for what it refuses
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    log(f"warning: {path} cannot be resumed from ({why}); training starts over")
    return None


def _bar(progress: bool, total: int, initial: int):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="base", unit="step")

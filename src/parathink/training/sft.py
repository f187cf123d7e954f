"""Cold-start SFT on parallel traces (Parallel-R1 §3.2; Unseen layout: §3.3, NPR §3.3).

Loss on response tokens only. Two collators:
- ``causal`` (Parallel-R1-Seen): the trace is plain text under causal attention;
- ``structured`` (Unseen, NPR, ParaThinker): the layout from ``parathink.formats.layouts`` becomes a 4-D
  additive mask and ``position_ids`` (paths of a block cannot see each other and restart their positions), so
  training sees exactly what the rollout engine generates under.
Built on transformers ``Trainer``: gradient accumulation, resume (optimiser, scheduler, RNG, data position),
DeepSpeed ZeRO and FSDP all come from ``TrainingArguments`` filled from the stage's ``SFTConfig``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from parathink.config.sft import OVERLONG, SFTConfig
from parathink.data.prompts import build_prompt
from parathink.formats.layouts import TagIds, build_batch_layout
from parathink.modeling.attention import to_4d_mask

IGNORE = -100


@dataclass
class EncodeStats:
    kept: int = 0
    dropped: int = 0  # over max_length and overlong=drop
    truncated: int = 0  # over max_length and overlong=truncate
    masked_tokens: int = 0  # response tokens given no loss (mask_spans)


def wrong_path_spans(response: str, answer: str, grammar: str) -> list[tuple[int, int]]:
    """Character spans of the paths whose own final answer is present and wrong.

    Self-distilled traces keep a problem when the *vote* is right, so about a quarter of their paths carry
    wrong arithmetic; training on those tokens teaches the mistakes. Masking them out of the loss keeps the
    paths in context (the summary still learns to read and vote over them) without imitating their errors.
    A path with no answer of its own (a teacher's partial step) is never masked.
    """
    from parathink.formats import parse
    from parathink.grading import grade

    trace = parse(response, grammar)
    if not trace.valid:
        return []
    spans = []
    for block in trace.blocks:
        for path in block.paths:
            extracted, correct = grade(path.text, str(answer))
            if extracted is not None and not correct:
                spans.append((path.start, path.end))
    return spans


def path_replay_trace(record: dict, solution: str, grammar: str, shared: int = 0,
                      k: int = 1) -> tuple[dict, list[tuple[int, int]]]:
    """(trace, masked spans): ``solution`` written as the first path of a ``k``-path block (NPR's guideline lists
    ``k`` plans), its first ``shared`` lines written before the block, and nothing after the path. Only the path's
    lines carry loss: the lines before the block, the tags and NPR's plans are masked (trained, lines before a
    block whose opening tag is masked teach the model to go on sequentially and never open one), and ``partial``
    drops the eos.

    Why: cold-start SFT on the tiny model costs its arithmetic inside paths on hard problems (the first line of a
    path right 44% of the time against the base's 61%, README). Replaying worked solutions in the very context a
    path is written in rehearses that skill where it is lost, without teaching a sequential answer (the response
    still opens a block) or a summary (none follows).
    """
    from parathink.formats.canonical import engine_form
    from parathink.teacher.traces import block_head, path_tags

    lines = solution.strip().splitlines()
    before = "\n".join(lines[:shared]) + ("\n" if shared else "")
    opening, closing = path_tags(grammar, 1)
    head = engine_form(before + block_head(grammar, k) + opening, grammar)  # as the engine writes the tags
    response = head + "\n".join(lines[shared:]) + closing
    tag_end = len(head.rstrip("\n"))  # the newline after the opening tag is the path's first token, as in traces
    return ({**record, "response": response, "partial": True},
            [(0, tag_end), (len(response) - len(closing.lstrip("\n")), len(response))])


def vote_replay_trace(record: dict, paths: list[str], grammar: str,
                      fork: str = "start") -> tuple[dict, list[tuple[int, int]]]:
    """(trace, masked spans): ``paths`` as one block with the teacher's vote summary and final answer; only the
    summary (from its opening tag) and what follows carry loss, the paths and their tags are masked. ``fork``:
    ``start`` opens the block at the response's start, ``agreed`` after the lines every path shares (the teacher's
    ``fork``), which are masked too.

    Why: the summary's failure at tiny scale is a blend. When two paths give 156 and one 148, the model writes
    146, a digit from each (the vote over digits is soft, and sampling at T=1 draws from it). Two right paths and
    one slipped path, in a random order, are that case with a known answer: they train the summary to copy the
    majority whole. The paths are masked because the slipped one is wrong and the right ones are path replay's job.
    """
    from parathink.formats.canonical import engine_form
    from parathink.teacher.selfdistill import self_trace
    from parathink.teacher.traces import summary_tag

    response, _, vote = self_trace(paths, grammar=grammar, fork=fork)
    if vote is None:
        raise ValueError(f"vote replay: the paths of record {record.get('id')!r} have no majority answer")
    response = engine_form(response, grammar)  # as the stage writes the teacher's traces
    return {**record, "response": response}, [(0, response.index(summary_tag(grammar)))]


def relabel_thoughts(ids: list[int], labels: dict[int, tuple[int, int]], max_paths: int,
                     rng) -> list[int]:
    """``ids`` with each ParaThinker block's thoughts given distinct labels drawn at random from 1..``max_paths``
    (ParaThinker §3: thoughts relabelled at random in training, so that every label's tag and path vector is
    trained and the model takes more paths at inference than any training trace had).

    ``labels``: token id -> (label, 1 opening | 0 closing) of every ``<thinkN>`` / ``</thinkN>``. A thought with a
    label above ``max_paths`` keeps its own. The layout reads a thought's path id from its label, so the vector a
    thought gets in training is the one its label gets from the engine.
    """
    by_label = {(n, is_open): t for t, (n, is_open) in labels.items()}
    out, mapping = [], {}
    for t in ids:
        if t in labels:
            n, is_open = labels[t]
            if is_open and n == 1:  # a new block: fresh labels
                mapping = dict(zip(range(1, max_paths + 1), rng.sample(range(1, max_paths + 1), max_paths)))
            t = by_label.get((mapping.get(n, n), is_open), t)
        out.append(t)
    return out


def encode_traces(records: Sequence[dict], tokenizer, max_length: int, overlong: str = "drop",
                  mask_spans: Sequence[list[tuple[int, int]]] | None = None):
    """[{input_ids, n_prompt, ignore}] for prompt + response + eos, and counts of what did not fit ``max_length``.

    ``mask_spans`` (one list per record): character spans of the response whose tokens get no loss; their
    token positions land in ``ignore``.
    """
    if overlong not in OVERLONG:
        raise ValueError(f"overlong must be one of {OVERLONG}, got {overlong!r}")
    for i, r in enumerate(records):
        if not isinstance(r.get("problem"), str) or not isinstance(r.get("response"), str):
            raise ValueError(f"trace {i} (id={r.get('id')!r}) lacks a string 'problem' or 'response'")
    prompts = tokenizer([build_prompt(r["problem"], tokenizer) for r in records], add_special_tokens=False)["input_ids"]
    enc = tokenizer([r["response"] for r in records], add_special_tokens=False,
                    return_offsets_mapping=mask_spans is not None)
    responses = enc["input_ids"]
    eos, stats, out = tokenizer.eos_token_id, EncodeStats(), []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ignore = []
        if mask_spans is not None and mask_spans[i]:
            ignore = [len(p) + t for t, (a, _) in enumerate(enc["offset_mapping"][i])
                      if any(s <= a < e for s, e in mask_spans[i])]
            stats.masked_tokens += len(ignore)
        ids = p + r + ([] if records[i].get("partial") else [eos])  # a partial trace stops mid-response
        if len(ids) > max_length:
            if overlong == "drop" or len(p) >= max_length:
                stats.dropped += 1
                continue
            ids, stats.truncated = ids[:max_length], stats.truncated + 1
        out.append({"input_ids": ids, "n_prompt": len(p), "ignore": [t for t in ignore if t < len(ids)]})
        stats.kept += 1
    return out, stats


def _labels(features, width: int) -> torch.Tensor:
    labels = torch.full((len(features), width), IGNORE, dtype=torch.long)  # [B, L]
    for i, f in enumerate(features):
        ids = torch.tensor(f["input_ids"])
        labels[i, f["n_prompt"]:len(ids)] = ids[f["n_prompt"]:]
        if f.get("ignore"):
            labels[i, f["ignore"]] = IGNORE
    return labels


class CausalCollator:
    """Right-padded batch under plain causal attention (Parallel-R1-Seen)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)  # [B, L]
        mask = torch.zeros((len(features), width), dtype=torch.long)  # [B, L]
        for i, f in enumerate(features):
            ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
            mask[i, :len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": _labels(features, width),
                "n_tokens": mask.sum()}


class StructuredCollator:
    """Right-padded batch with the layout's 4-D mask and positions (Unseen / NPR / ParaThinker)."""

    def __init__(self, pad_id: int, tag_ids: TagIds, dtype: torch.dtype = torch.float32, path_ids: bool = False):
        self.pad_id, self.tag_ids, self.dtype, self.path_ids = pad_id, tag_ids, dtype, path_ids

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        seqs = [f["input_ids"] for f in features]
        lay = build_batch_layout(seqs, self.tag_ids)
        width = lay.position_ids.shape[1]
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)  # [B, L]
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
        batch = {"input_ids": ids, "attention_mask": to_4d_mask(lay.attention_mask, self.dtype),  # [B, 1, L, L]
                 "position_ids": lay.position_ids, "labels": _labels(features, width),
                 "n_tokens": (~lay.padding).sum()}
        if self.path_ids:
            batch["path_ids"] = lay.path_ids  # [B, L]
        return batch


class SFTTrainer(Trainer):
    """Trainer that counts real (non-padding) tokens for tokens/s and computes the loss in chunks.

    The loss is Hugging Face's causal-LM loss (mean token NLL, or the sum over ``num_items_in_batch`` when the Trainer
    normalises over the accumulated batch), computed from the final hidden states through ``lm_head``
    ``chunk_tokens`` label tokens at a time (``parathink.modeling.chunked``): the model's own loss would build the
    whole [B, L, V] logits and an fp32 copy, 18.5 GiB for a micro-batch of 4 x 8,192 tokens of Qwen3-4B.
    """

    tokens_seen = 0
    chunk_tokens = 1024

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        from parathink.modeling.chunked import causal_lm_nll, projectable

        n = inputs.pop("n_tokens", None)
        if n is not None and model.training:
            self.tokens_seen += int(n)
        inner = self.accelerator.unwrap_model(model)
        if return_outputs or "labels" not in inputs or self.label_smoother is not None or not projectable(inner):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        nll, count = causal_lm_nll(model, inputs, self.chunk_tokens, IGNORE)
        loss = nll / (num_items_in_batch if num_items_in_batch is not None else count.clamp(min=1))
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as Trainer.compute_loss: DDP averages the gradients
        return loss


class TrackerCallback(TrainerCallback):
    """Per-step loss, learning rate, grad norm and tokens/s into the stage's tracker."""

    def __init__(self, tracker, trainer_ref: list):
        self.tracker, self.trainer_ref = tracker, trainer_ref
        self.last_t, self.last_tokens = None, 0

    def on_train_begin(self, args, state, control, **kw):
        self.last_t, self.last_tokens = time.perf_counter(), self.trainer_ref[0].tokens_seen

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or "loss" not in logs:
            return
        now, tokens = time.perf_counter(), self.trainer_ref[0].tokens_seen
        rate = (tokens - self.last_tokens) / max(1e-9, now - self.last_t)
        self.last_t, self.last_tokens = now, tokens
        metrics = {"loss": logs["loss"], "lr": logs.get("learning_rate"), "grad_norm": logs.get("grad_norm"),
                   "tokens_per_s": rate, "epoch": logs.get("epoch")}
        self.tracker.log_metrics({k: float(v) for k, v in metrics.items() if v is not None}, step=state.global_step)


class TimeBudgetCallback(TrainerCallback):
    """Stop (and checkpoint) once the wall-clock budget is spent; the schedule keeps its planned length."""

    def __init__(self, minutes: float):
        self.seconds, self.t0 = minutes * 60, None

    def on_train_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        from parathink import distributed

        # Every process of a multi-process launch stops at the same step, or the others wait forever.
        if distributed.group().any(time.perf_counter() - self.t0 >= self.seconds):
            control.should_training_stop = True
            control.should_save = True


def global_batch_plan(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Gradient-accumulation steps so that micro x accumulation x world = the configured global batch."""
    per_step = micro_batch * world_size
    if global_batch % per_step:
        raise ValueError(f"sft.global_batch={global_batch} is not a multiple of micro_batch x world size = {per_step}")
    return global_batch // per_step


def training_arguments(cfg: SFTConfig, out_dir, *, seed: int, progress: bool, world_size: int = 1):
    """transformers' TrainingArguments from the stage's settings (DeepSpeed / FSDP included)."""
    from transformers import TrainingArguments

    accum = global_batch_plan(cfg.global_batch, cfg.micro_batch, world_size)
    extra = {}
    if cfg.deepspeed:
        extra["deepspeed"] = cfg.deepspeed  # resolved by the stage (stages/sft/ (settings))
    if cfg.fsdp:
        extra["fsdp"] = cfg.fsdp
        extra["fsdp_config"] = dict(cfg.fsdp_config)
    return TrainingArguments(
        output_dir=str(out_dir), per_device_train_batch_size=cfg.micro_batch, gradient_accumulation_steps=accum,
        learning_rate=cfg.lr, weight_decay=cfg.weight_decay, warmup_steps=cfg.warmup_ratio,  # a float < 1 is a ratio
        lr_scheduler_type=cfg.scheduler, num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        adam_beta1=cfg.betas[0], adam_beta2=cfg.betas[1], max_grad_norm=cfg.grad_clip,
        bf16=cfg.precision == "bf16", fp16=False, logging_steps=1, logging_first_step=True,
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=cfg.save_total_limit,
        report_to=[], disable_tqdm=not progress, seed=seed, data_seed=seed, remove_unused_columns=False,
        dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(), save_only_model=False,
        activation_checkpointing=cfg.gradient_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if cfg.gradient_checkpointing else None, **extra)


def train_sft(model, tokenizer, train_set: list[dict], collator, cfg: SFTConfig, *, work_dir, tracker,
              seed: int = 0, progress: bool = False):
    """Run (or resume) SFT; checkpoints live in ``work_dir/trainer``. Returns (summary metrics, trainer)."""
    from transformers.trainer_utils import get_last_checkpoint

    out = work_dir / "trainer"
    out.mkdir(parents=True, exist_ok=True)
    world_size = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    args = training_arguments(cfg, out, seed=seed, progress=progress, world_size=world_size)
    ref: list = []
    callbacks = [TrackerCallback(tracker, ref)]
    if cfg.max_minutes > 0:
        callbacks.append(TimeBudgetCallback(cfg.max_minutes))
    trainer = SFTTrainer(model=model, args=args, train_dataset=train_set, data_collator=collator,
                         processing_class=tokenizer, callbacks=callbacks)
    trainer.chunk_tokens = cfg.logit_chunk_tokens
    ref.append(trainer)
    trainer.remove_callback(PrinterCallback)  # metrics go to the tracker, not as dicts on stdout
    last = get_last_checkpoint(str(out))
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=last)
    seconds = time.perf_counter() - t0
    return {"train_loss": float(result.training_loss), "steps": float(trainer.state.global_step),
            "planned_steps": float(trainer.state.max_steps),
            "resumed_from_step": float(int(last.rsplit("-", 1)[1]) if last else 0), "seconds": seconds,
            "tokens_per_s": trainer.tokens_seen / max(1e-9, seconds)}, trainer

"""The `sft` stage: cold-start SFT on ``filter``'s accepted traces (Parallel-R1 §3.2, Unseen §3.3).

Everything that can be wrong is checked before training starts: the config (``validate``), the starting model
and its tokenizer (loadable), structured attention against the model's attention implementation, and the
traces (present, parseable, not all over-long). Checkpoints go to ``work_dir/trainer`` (a rerun resumes),
the final model to ``out_dir/model``. Its gate (``stages/sft/gate.py``): the format learnt on a held-out
probe, accuracy kept against the start model, and the schedule run to the end.
"""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import OmegaConf

from parathink import jsonl
from parathink.config.sft import REPLAYS, SFTConfig, start_stage
from parathink.config.thresholds import SFTThresholds
from parathink.errors import BadInput, ConfigError
from parathink.formats.grammar import GRAMMAR_REGISTRY, get_grammar
from parathink.logs import log
from parathink.pipeline.compose import resolve_config_path
from parathink.placement.roles import StageRole
from parathink.stages.context import StageContext
from parathink.stages.contract import Gate, StageSpec
from parathink.stages.sft.gate import sft_gate
from parathink.training.stage_state import free_accelerator, own_training_state


def validate(cfg) -> None:
    settings(cfg)


def settings(cfg) -> SFTConfig:
    """The ``sft`` section as a checked ``SFTConfig``, with what it asks of the format and the model config."""
    node = OmegaConf.to_container(cfg.sft, resolve=True)
    if node.get("deepspeed"):  # written relative to the checkout; found in the wheel's copy in a pod
        node["deepspeed"] = resolve_config_path(str(node["deepspeed"]))
    s = SFTConfig.from_cfg(node)
    grammar = GRAMMAR_REGISTRY.get(str(cfg.format))  # None: unknown (the config schema refuses it first)
    for key in REPLAYS:
        fork = getattr(s, key).fork
        if fork != "start" and grammar is not None and grammar.forks_at_start:
            raise ConfigError(f"sft.{key}.fork={fork!r}: a {grammar.title} block opens the response; use start")
    # Relabelling draws new numbers for the thoughts' tags, so it needs numbered path tags and two numbers at least.
    if s.relabel_thoughts and (not (grammar and grammar.numbered_paths) or int(cfg.model.parathinker_max_paths) < 2):
        numbered = "|".join(name for name, g in GRAMMAR_REGISTRY.items() if g.numbered_paths)
        raise ConfigError(f"sft.relabel_thoughts: needs format={numbered} and model.parathinker_max_paths >= 2, got "
                          f"{cfg.format!r} and {cfg.model.parathinker_max_paths}")
    if s.collator == "structured" and cfg.model.attn_implementation.startswith("flash_attention"):
        raise ConfigError(f"sft.collator=structured needs a 4-D mask; model.attn_implementation="
                          f"{cfg.model.attn_implementation!r} cannot take one (use sdpa or eager)")
    return s


def read_traces(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"sft: accepted traces not found at {path}")
    # The filter wrote this file: a bad line in it is bad input to this stage (exit 2), not a bug.
    records = [rec for _, rec in jsonl.read(path, error=lambda why: BadInput(f"sft: {why}"))]
    if not records:
        raise ValueError(f"sft: {path} holds no traces")
    return records


def _replay(s: SFTConfig, grammar: str, traces: list[dict]) -> dict[str, list[tuple[dict, list[tuple[int, int]]]]]:
    """Per replay kind, ``sft.<kind>.n`` new synthetic problems (none of the traces', none shared between the
    kinds) made into (trace, masked spans):

    - ``path_replay``: the worked solution as the first path of an opened block (``path_replay_trace``); with
      ``fork: random`` a uniform number of its operations (0 to all but the last) comes before the block. An NPR
      block lists as many plans as a random trace of the filter's has;
    - ``vote_replay``: a block of two worked solutions and one slipped solution in a random order, with the
      teacher's vote summary; loss on the summary and the final answer only (``vote_replay_trace``).
    """
    import random

    from parathink.data.synthetic import generate, slipped_solution, worked_solution
    from parathink.formats import parse
    from parathink.training.sft import path_replay_trace, vote_replay_trace

    widths = [len(t.blocks[-1].paths) for t in (parse(r.get("response", ""), grammar) for r in traces) if t.parallel]
    widths = widths or [1]
    seen = {t["problem"] for t in traces}
    out = {}
    for key in REPLAYS:
        replay = getattr(s, key)
        n = replay.n
        if n == 0:
            out[key] = []
            continue
        # Twice the draw leaves room for the problems already taken (a few percent here).
        pool = [p for p in generate(replay.level, "train", 2 * n + len(seen), seed=replay.seed)
                if p["problem"] not in seen][:n]
        if len(pool) < n:
            raise ValueError(f"sft.{key}: only {len(pool)} new {replay.level} problems for n={n}")
        seen.update(p["problem"] for p in pool)
        rng, fork = random.Random(replay.seed), replay.fork
        if key == "path_replay":
            out[key] = [path_replay_trace(p, worked_solution(p), grammar, k=rng.choice(widths),
                                          shared=rng.randrange(len(p["ops"])) if fork == "random" else 0)
                        for p in pool]
            continue
        made = []
        for p in pool:
            right = worked_solution(p)
            paths = [right, right, slipped_solution(p, rng)]
            rng.shuffle(paths)
            made.append(vote_replay_trace(p, paths, grammar, fork=fork))
        out[key] = made
    return out


def _relabel(train_set: list[dict], tok, grammar: str, max_paths: int, seed: int) -> None:
    """ParaThinker's random thought labels (``training.sft.relabel_thoughts``), in place, reproducible by seed."""
    import random

    from parathink.training.sft import relabel_thoughts

    g = get_grammar(grammar)
    labels = {tok.convert_tokens_to_ids(tag): (n, o)
              for n in g.path_numbers() for o, tag in ((1, g.path_open_tag(n)), (0, g.path_close_tag(n)))}
    rng = random.Random(seed)
    for example in train_set:
        example["input_ids"] = relabel_thoughts(example["input_ids"], labels, max_paths, rng)


def _model_source(cfg, ctx: StageContext):
    stage = start_stage(cfg)
    return ctx.input(stage) / "model" if stage is not None else str(cfg.sft.init)


def _training_set(s: SFTConfig, grammar: str, traces: list[dict], tok) -> tuple[list[dict], dict[str, int]]:
    """The filter's traces and the replays, encoded; and what was kept, dropped and masked (the stage's counts)."""
    from parathink.training.sft import encode_traces

    replays = _replay(s, grammar, traces)
    replay = [r for key in REPLAYS for r in replays[key]]
    counts = {"traces": len(traces), **{key: len(replays[key]) for key in REPLAYS}}  # the filter's; replays per kind
    spans = None
    if s.mask_wrong_paths:
        from parathink.training.sft import wrong_path_spans

        spans = [wrong_path_spans(t["response"], t["answer"], grammar) if t.get("answer") else [] for t in traces]
    counts["masked_paths"] = sum(map(len, spans or []))
    if replay:  # appended after the wrong-path count: their masked spans are not wrong paths of the teacher
        spans = (spans if spans is not None else [[] for _ in traces]) + [r[1] for r in replay]
        traces = traces + [r[0] for r in replay]
    train_set, stats = encode_traces(traces, tok, s.max_length, s.overlong, mask_spans=spans)
    if not train_set:
        raise ValueError(f"sft: all {len(traces)} traces exceed sft.max_length={s.max_length}")
    counts.update(kept=stats.kept, dropped=stats.dropped, truncated=stats.truncated, masked_tokens=stats.masked_tokens)
    return train_set, counts


def _collator(cfg, s: SFTConfig, model, tok):
    """Structured (a 4-D mask and restarted positions, the model's attention checked for it) or causal batches."""
    from parathink.formats.layouts import TagIds
    from parathink.modeling import check_structured_attention
    from parathink.modeling.factory import to_dtype
    from parathink.training.sft import CausalCollator, StructuredCollator

    if s.collator != "structured":
        return CausalCollator(tok.pad_token_id)
    check_structured_attention(model)
    # The additive mask in the dtype attention computes in: bf16 under autocast or DeepSpeed's bf16, else fp32.
    return StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, cfg.format),
                              dtype=to_dtype("bfloat16" if s.precision == "bf16" else "float32"),
                              path_ids=int(cfg.model.parathinker_max_paths) > 0)


def run(cfg, ctx: StageContext) -> dict[str, float]:
    import torch

    from parathink.formats.canonical import engine_form
    from parathink.modeling import install_path_vectors, load_model
    from parathink.training.sft import train_sft

    s = settings(cfg)
    t0 = time.perf_counter()
    if s.num_threads > 0:
        torch.set_num_threads(s.num_threads)
    # Teach the text the engine will produce: no whitespace before the tags it forces (formats.canonical).
    traces = [{**t, "response": engine_form(t["response"], str(cfg.format))}
              for t in read_traces(ctx.input("filter") / "accepted.jsonl")]
    # fp32 parameters whatever model.dtype says: they are the master weights (sft.precision says how the forward
    # computes), and the published model keeps every digit of the update (training.master_weights says why).
    model, tok = load_model(_model_source(cfg, ctx), dtype="float32",
                            attn_implementation=cfg.model.attn_implementation)
    if int(cfg.model.parathinker_max_paths) > 0:
        install_path_vectors(model, int(cfg.model.parathinker_max_paths))
    train_set, counts = _training_set(s, str(cfg.format), traces, tok)
    if s.relabel_thoughts:
        _relabel(train_set, tok, str(cfg.format), int(cfg.model.parathinker_max_paths), ctx.seed)
    collator = _collator(cfg, s, model, tok)
    ctx.tracker.log_params({"sft.collator": s.collator, **{f"sft.{key}": n for key, n in counts.items()}})
    model.train()
    metrics, trainer = train_sft(model, tok, train_set, collator, s, work_dir=ctx.work_dir, tracker=ctx.tracker,
                                 seed=ctx.seed, progress=ctx.progress)
    out = ctx.out_dir / "model"
    trainer.save_model(str(out))  # gathers ZeRO-3 / FSDP shards
    if trainer.is_world_process_zero():
        tok.save_pretrained(out)
        # The Trainer pickles its arguments beside the weights, the scratch's absolute path (output_dir) among them,
        # which would make two identical runs in two run directories hash differently. The manifest has the settings.
        (out / "training_args.bin").unlink(missing_ok=True)
    free_accelerator(trainer.accelerator)  # its DeepSpeed engine would outlive the stage (training.stage_state)
    if metrics["steps"] < metrics["planned_steps"]:
        # The schedule was cut before it annealed: the model is worse than the config promises, and what follows
        # (RL from it, the eval table) inherits that. Said where the user looks, and kept in the manifest.
        log(f"sft: WARNING: sft.max_minutes={s.max_minutes} stopped training at step {int(metrics['steps'])} of "
            f"{int(metrics['planned_steps'])}, before the learning-rate schedule ended; the model is undertrained "
            "(set sft.max_minutes=0 to finish)")
    metrics.update({key: float(n) for key, n in counts.items()})
    metrics["stage_minutes"] = (time.perf_counter() - t0) / 60
    return metrics


# Under torchrun / accelerate launch every process trains (the Trainer's DDP, or DeepSpeed / FSDP from sft.deepspeed
# and sft.fsdp); the model is written by the main process. The Trainer's accelerate/DeepSpeed state is reset around
# the run, so that an RL stage under DeepSpeed can follow in the same process (parathink.training.stage_state).
STAGE = StageSpec(run=own_training_state(run), validate=validate, gate=Gate(sft_gate, SFTThresholds),
                  data_parallel=True, role=StageRole(memory="sft", trains_model=True, probes_model=True))

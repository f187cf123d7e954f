"""The Qwen3-4B sections of gpu_check: every GPU stage's cost at the real model size (issues 22 and 42).

Qwen3-4B-Base's architecture with random weights in bf16 on one GPU (speed does not depend on the weights), with
its vocabulary (151,936); the toy tokenizer supplies the grammar's tag ids (ids it does not know decode to nothing).
Each function is one section of gpu_check's plan, ``fn(part, deadline, bench)``: it fills ``part`` as it goes and
calls ``deadline.check(...)`` between its units of work, so a section over its box stops at the next unit and keeps
what it measured (no signal: a CUDA-graph capture is never interrupted). In the plan's order:

- ``build``: the 4B model (36 layers, bf16) on the device.
- ``ceilings``: the GPU's memory bandwidth (a large device copy: bytes read + written over the time) and its bf16
  matrix rate, measured in the same call as what they bound.
- ``decode_check``: before anything is timed, the engine's CUDA-graph decode against the same decode without graphs
  (same seed, forks included: the same tokens and log-probs) and against the eager one; the host syncs of a decode
  step (none) and of a whole step (one: the sampled tokens), counted by CUDA's sync debug mode.
- ``decode``: the engine's tokens/s at each batch against the bandwidth limit of the bytes each step reads: every
  weight, plus the KV window the step attends over, counted as the step reads it (``counting_reads``: the padded
  power-of-two bucket of rows x window under CUDA graphs, the gathered entries of the paged cache), not the live
  KV. At the headline batch also the engine without graphs and with a paged cache under a budget (same tokens);
  last, transformers' ``generate`` with its static cache (compilation off) at each batch.
- ``sft``: tokens/s and MFU of the structured collator's batch (4-D mask, restarted positions) at ``sft_len`` tokens,
  bf16 weights and AdamW, the loss in chunks as the stage computes it; which SDPA kernel runs with the 4-D mask; the
  peak memory against the memory model's parts of the same step.
- ``fork``: bench_engine's fork speed-ups (K paths decoded as rows against one stream), one K at a time.
- ``rl``: one step of ``parathink.training.rl`` (rollout, update, update with ``old_logprobs=recompute``) on a
  model of Qwen3-4B's width and vocabulary with as many of its layers as the memory model puts within
  ``RL_TARGET_GIB`` (bf16 weights, fp32 masters, AdamW, checkpointing, chunked log-probs): the measured peak against
  that estimate checks the memory model (``parathink.placement.memory_model``) on a real GPU.

``Scale`` holds the sizes: the GPU's, and toy ones with which ``--device cpu`` runs the same code in CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import bench_engine
import torch

from parathink.engine import Engine, SamplingConfig
from parathink.engine import decode as decode_module
from parathink.engine.cache import RowCache
from parathink.engine.decode import StaticDecode
from parathink.engine.kv_budget import BLOCK_TOKENS, blocks_for, kv_bytes_per_token, model_kv_bytes_per_token
from parathink.engine.paged import PagedCache
from parathink.placement import memory_model
from parathink.testing.toy import toy_model

GIB = 2**30
# Qwen3-4B-Base's config.json.
QWEN3_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                max_position_embeddings=40960, tie_word_embeddings=True)
TOY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           head_dim=16, rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=8192,
           tie_word_embeddings=True)
BF16_DENSE_PEAK = 989.4e12  # H100/H200 SXM datasheet, dense bf16: the denominator of MFU
# The RL step's memory-model estimate stays under this on any GPU, so that it fits an 80 GB H100 (78 GiB usable)
# with room for what the model does not count, and runs on an H100 and an H200 alike (their figures compare).
RL_TARGET_GIB = 60
# SFT turns on gradient checkpointing when the memory model puts the step above this share of the device.
SFT_CHECKPOINT_ABOVE = 0.85
CPU_CAPACITY = 80 * GIB  # the dry run sizes its (toy) estimates against an H100
NEG = float("-inf")
IGNORE = -100


@dataclass(frozen=True)
class Scale:
    arch: dict
    vocab: int
    batches: tuple[int, ...]  # decode batches; ``headline_batch`` is one of them
    headline_batch: int
    prompt_len: int
    new_tokens: int  # per decode timing; prompt_len + new_tokens a multiple of BLOCK_TOKENS (``paged_budget``)
    rounds: int  # timed repeats (best kept) after one warm-up
    check_tokens: int  # decode_check's new tokens
    fork_ks: tuple[int, ...]
    path_len: int
    sft_len: int
    sft_steps: int
    rl_prompts: int
    rl_group: int
    rl_new_tokens: int
    rl_rows: int  # the engine's rollout batch (streams in flight)
    rl_micro: int  # rollouts per forward/backward
    copy_mib: int  # the bandwidth copy
    matmul: int  # the matrix-rate product's size
    probe_rows: int = 256  # a gate's probe: 64 problems x 4 samples in flight (hydra_conf/stage/sft.yaml at GPU size)
    probe_budget_tokens: int = 3000  # the probe's max_new_tokens its KV budget is sized for
    probe_new_tokens: int = 256  # what the call samples (the pool is allocated whole at its start; tokens only time)
    paged_rows: int = 128  # paged decode under a tight budget: rows x tokens (issue 47: 128 x 2,000)
    paged_tokens: int = 2000


GPU = Scale(arch=QWEN3_4B, vocab=151_936, batches=(1, 16, 64, 256), headline_batch=64, prompt_len=32,
            new_tokens=256, rounds=1, check_tokens=64, fork_ks=(2, 4, 8, 16), path_len=32, sft_len=4096,
            sft_steps=2, rl_prompts=16, rl_group=8, rl_new_tokens=1024, rl_rows=128, rl_micro=8, copy_mib=4096,
            matmul=8192)
DRY = Scale(arch=TOY, vocab=1000, batches=(1, 2, 4), headline_batch=4, prompt_len=8, new_tokens=8, rounds=1,
            check_tokens=24, fork_ks=(2, 4), path_len=4, sft_len=128, sft_steps=1, rl_prompts=2, rl_group=2,
            rl_new_tokens=8, rl_rows=4, rl_micro=2, copy_mib=16, matmul=256, probe_rows=8, probe_budget_tokens=64,
            probe_new_tokens=8, paged_rows=8, paged_tokens=24)


@dataclass
class Bench:
    """What the sections share: the sizes, the device, the 4B model once built, and the figures so far."""

    scale: Scale
    device: str
    record: dict = field(default_factory=dict)  # the qwen3_4b figures (decode reads the ceilings' bandwidth)
    model: Any = None
    tok: Any = None

    def need_model(self):
        if self.model is None:
            raise RuntimeError("no model: the build section did not finish (its error is in qwen3_4b.build)")
        return self.model, self.tok

    def free_model(self) -> None:
        self.model = None
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------------- build


def build(part: dict, deadline, bench: Bench) -> None:
    bench.model, bench.tok = new_model(bench.scale.arch, bench.scale.vocab, bench.device, torch.bfloat16)
    model = bench.model
    part.update(model="Qwen3-4B architecture, random weights" if bench.scale.arch is QWEN3_4B else "toy architecture",
                dtype="bfloat16", vocab=bench.scale.vocab, params=sum(p.numel() for p in model.parameters()),
                weight_bytes_per_step=weight_bytes(model),
                kv_bytes_per_token=model_kv_bytes_per_token(model.config, "bfloat16"),
                scale=dataclasses.asdict(bench.scale))


def new_model(arch: dict, vocab: int, device: str, dtype: torch.dtype):
    """A random-weight Qwen3 of ``arch`` built on ``device`` in ``dtype`` (4B parameters on a CPU take minutes),
    and the toy tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = toy_model(steps=0)
    cfg = Qwen3Config(vocab_size=vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **arch)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    return model, tok


def weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: all of them (tied embeddings are read whole as the output layer)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    if not model.config.tie_word_embeddings:  # an untied input embedding is read one row per token
        emb = model.get_input_embeddings().weight
        total -= emb.numel() * emb.element_size()
    return total


def wall_times(figures: dict) -> dict:
    """bench_engine's figures without its process-CPU times, which mean nothing for GPU work."""
    return {k: wall_times(v) if isinstance(v, dict) else v for k, v in figures.items() if "cpu" not in k}


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else None


def _timed(fn, device: str, rounds: int = 1) -> tuple[float, Any]:
    """(best wall time of ``rounds`` calls, the device synchronised around each; the last call's result)."""
    best, out = float("inf"), None
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best, out


def capacity(device: str) -> int:
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return CPU_CAPACITY


class PeakMemory:
    """Peak memory of the phases of a part, from a baseline: ``torch.cuda.max_memory_allocated`` on a GPU; on a CPU
    (the dry run) the process's resident high-water mark, which counts the interpreter too (not comparable)."""

    def __init__(self, device: str):
        from parathink.placement import peak as memory

        self.device, self.memory = device, memory
        self.by = ("torch.cuda.max_memory_allocated" if device == "cuda"
                   else "process RSS high-water mark (CPU dry run: includes the interpreter, not comparable)")
        self.baseline = torch.cuda.memory_allocated() if device == "cuda" else 0
        self.phases: dict[str, float] = {}
        self.start()

    def start(self) -> None:
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        else:
            self.memory.reset_peak()

    def end(self, phase: str) -> None:
        peak = torch.cuda.max_memory_allocated() if self.device == "cuda" else self.memory.peak_rss_mb() * 2**20
        self.phases[phase] = round(peak / GIB, 3)
        self.start()

    def figures(self, estimate: int) -> dict:
        peak = max(self.phases.values())
        return {"estimate_gib": round(estimate / GIB, 3), "measured_peak_gib": peak,
                "measured_over_estimate": round(peak * GIB / estimate, 3), "phase_peaks_gib": self.phases,
                "baseline_gib": round(self.baseline / GIB, 3), "measured_by": self.by}


# ------------------------------------------------------------------------------------------------------- ceilings


def ceilings(part: dict, deadline, bench: Bench) -> None:
    scale, device = bench.scale, bench.device
    n = scale.copy_mib * 2**20 // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_(-1, 1)  # never zeros: see METHOD.md
    dst = torch.empty_like(src)
    dst.copy_(src)
    t, _ = _timed(lambda: [dst.copy_(src) for _ in range(5)], device, 3)
    part["bandwidth_gb_s"] = 2 * src.numel() * src.element_size() / (t / 5) / 1e9  # read + written
    src = dst = None  # freed before the product's inputs (a del would unbind the names the closure reads)
    deadline.check("the matrix product")
    a = torch.randn(scale.matmul, scale.matmul, dtype=torch.bfloat16, device=device)
    b = torch.randn_like(a)
    a @ b
    t, _ = _timed(lambda: [a @ b for _ in range(5)], device, 3)
    part["matmul_tflops"] = 2 * scale.matmul**3 / (t / 5) / 1e12


# ------------------------------------------------------------------------------------------------------- decode


def _regular_ids(tok) -> list[int]:
    """The tokenizer's ids that are neither special nor a grammar's tag."""
    from parathink.formats.tags import TAGS

    special = set(tok.all_special_ids) | {tok.convert_tokens_to_ids(t) for g in TAGS.values() for t in g}
    return [i for i in range(len(tok)) if i not in special]


def _prompts(tok, n: int, length: int, seed: int = 0) -> list[list[int]]:
    ids, rng = _regular_ids(tok), random.Random(seed)
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def decode_check(part: dict, deadline, bench: Bench) -> None:
    """The CUDA-graph decode samples what the same decode without graphs samples; no host sync inside a step."""
    model, tok = bench.need_model()
    ids = tok.convert_tokens_to_ids
    # Random weights never open a block: a bias makes the opener and the path closer likely, so forks and merges
    # run through the graphs (the reported log-probs stay the raw ones).
    sampling = SamplingConfig(max_new_tokens=bench.scale.check_tokens, batch_size=8, seed=1,
                              logit_bias={ids("<Parallel>"): 10.0, ids("</Path>"): 8.0})
    prompts = _prompts(tok, 8, bench.scale.prompt_len, seed=1)
    runs = {}
    for name, kw in (("graphs", {"decode": "static"}), ("static", {"decode": "static", "cuda_graphs": False}),
                     ("eager", {"decode": "eager"})):
        deadline.check(f"the {name} decode")
        runs[name] = Engine(model, tok, "parallel_r1", "structured", **kw).generate(prompts, sampling)
    g, s, e = runs["graphs"], runs["static"], runs["eager"]
    part["forks"] = sum(x.num_blocks for x in g)
    part["tokens"] = sum(len(x.response_ids) for x in g)
    part["graphs_vs_static_same_tokens"] = [x.response_ids for x in g] == [x.response_ids for x in s]
    part["graphs_vs_static_max_logprob_diff"] = _common_prefix_gap(g, s)
    part["graphs_vs_eager_same_samples"] = sum(x.response_ids == y.response_ids for x, y in zip(g, e)) / len(g)
    part["graphs_vs_eager_max_logprob_diff"] = _common_prefix_gap(g, e)  # bf16: other shapes, other rounding
    if bench.device == "cuda":
        deadline.check("the host syncs")
        part.update(host_syncs(model, tok, prompts, sampling))
    part["passed"] = (part["graphs_vs_static_same_tokens"] and part["graphs_vs_static_max_logprob_diff"] <= 1e-3
                      and part.get("decode_step_host_syncs", 0) == 0)
    if not part["passed"]:
        raise AssertionError(f"the CUDA-graph decode does not match the decode without graphs: {part}")


def _common_prefix_gap(a, b) -> float:
    """Largest log-prob difference over the tokens two runs share (up to each pair's first different token)."""
    gap = 0.0
    for x, y in zip(a, b):
        for tx, ty, lx, ly in zip(x.response_ids, y.response_ids, x.logprobs, y.logprobs):
            if tx != ty:
                break
            gap = max(gap, abs(lx - ly))
    return gap


def host_syncs(model, tok, prompts, sampling) -> dict:
    """Host syncs counted by CUDA's sync debug mode, once every graph is captured: inside the decode step (a
    replay; captures are exempt, PyTorch synchronises around them) and per step of the whole loop."""
    engine = Engine(model, tok, "parallel_r1", "structured", decode="static")
    engine.generate(prompts, sampling)  # captures the buckets
    call, capture = StaticDecode.__call__, decode_module.capture
    steps, inside = [0], [0]

    def checked_call(self, feed, n):
        steps[0] += 1
        torch.cuda.set_sync_debug_mode("error")
        try:
            return call(self, feed, n)
        except RuntimeError as e:
            inside[0] += 1
            raise RuntimeError(f"a host sync inside the decode step: {e}") from None
        finally:
            torch.cuda.set_sync_debug_mode("warn")

    def unchecked_capture(step, pool):
        torch.cuda.set_sync_debug_mode(0)
        try:
            return capture(step, pool)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    StaticDecode.__call__, decode_module.capture = checked_call, unchecked_capture
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            engine.generate(prompts, sampling)
    finally:
        torch.cuda.set_sync_debug_mode(0)
        StaticDecode.__call__, decode_module.capture = call, capture
    syncs = sum("synchroniz" in str(w.message).lower() for w in seen)
    return {"decode_step_host_syncs": inside[0], "host_syncs_per_step": syncs / max(1, steps[0]),
            "decode_steps": steps[0]}


@contextlib.contextmanager
def counting_captures():
    """Counts the engine's CUDA-graph captures inside the block: ``with counting_captures() as n: ...; n[0]``."""
    original, count = decode_module.capture, [0]

    def counting(step, pool):
        count[0] += 1
        return original(step, pool)

    decode_module.capture = counting
    try:
        yield count
    finally:
        decode_module.capture = original


@contextlib.contextmanager
def counting_reads():
    """The decode steps inside the block and the KV entries they read (rows x window, summed over steps), as each
    step reads them: a replayed graph its bucket (``StaticDecode._replay``'s key: rows and window padded to powers
    of two), any other step what it asks the cache for (``layer(0, ...)``: a static step's padded bucket, an eager
    step's live rows and longest row, a paged step's gathered entries). ``with counting_reads() as c: ...``,
    then ``c["steps"]``, ``c["entries"]``; entries x KV bytes per token = the KV bytes read, every layer's."""
    counts, replaying = {"steps": 0, "entries": 0}, [False]
    replay = StaticDecode._replay
    layers = {cls: cls.layer for cls in (RowCache, PagedCache)}

    def counted_replay(self, key, step):
        counts["steps"] += 1
        counts["entries"] += key[0] * key[1]
        replaying[0] = True  # a capture inside runs the step's Python: its reads are the replay's, counted once
        try:
            return replay(self, key, step)
        finally:
            replaying[0] = False

    def counted(original):
        def layer(self, li, row0, b, s):
            if li == 0 and not replaying[0]:
                counts["steps"] += 1
                counts["entries"] += b * s
            return original(self, li, row0, b, s)
        return layer

    StaticDecode._replay = counted_replay
    for cls, fn in layers.items():
        cls.layer = counted(fn)
    try:
        yield counts
    finally:
        StaticDecode._replay = replay
        for cls, fn in layers.items():
            cls.layer = fn


def bandwidth_limit(tokens: int, reads: dict, weight_bytes_per_step: int, kv_bytes_per_token: int,
                    bandwidth_gb_s: float) -> dict:
    """The tokens/s that reading every byte the call's steps read at the copy bandwidth allows: every weight per
    decode step and once for the prefill, plus the KV window each step read (``counting_reads``)."""
    weights = (reads["steps"] + 1) * weight_bytes_per_step
    kv = reads["entries"] * kv_bytes_per_token
    bandwidth = bandwidth_gb_s * 1e9
    return {"bandwidth_limit_tok_s": tokens * bandwidth / (weights + kv),
            "weights_only_limit_tok_s": tokens * bandwidth / weights, "decode_steps": reads["steps"],
            "weight_bytes_read": weights, "kv_bytes_read": kv, "kv_share_of_bytes": kv / (weights + kv)}


def paged_budget(rows: int, prompt_len: int, new_tokens: int, token_bytes: int) -> int:
    """A KV budget that pages the cache and still fits every row to its end (no preemption): each row's blocks plus
    the sink, when that is below the contiguous cache's worst case (rows x (prompt + new + 1) entries); else just
    under the worst case (some streams then wait for blocks)."""
    fits = (rows * blocks_for(prompt_len + new_tokens) + 1) * BLOCK_TOKENS * token_bytes
    worst = rows * (prompt_len + new_tokens + 1) * token_bytes
    return min(fits, worst - 1)


def decode(part: dict, deadline, bench: Bench) -> None:
    """Engine tokens/s per batch against the bandwidth limit of weights + the KV window read; at the headline batch
    the engine without graphs and with a paged cache (same tokens); then ``generate`` per batch."""
    model, tok = bench.need_model()
    scale, device = bench.scale, bench.device
    bandwidth = bench.record.get("ceilings", {}).get("bandwidth_gb_s")
    n, wbytes = scale.new_tokens, weight_bytes(model)
    tbytes = model_kv_bytes_per_token(model.config, "bfloat16")

    def timed_engine(row: dict, key: str, engine: Engine, prompts, sampling) -> list:
        with counting_captures() as captures, counting_reads() as reads:
            t, samples = _timed(lambda: engine.generate(prompts, sampling), device, scale.rounds)
        for k in reads:
            reads[k] //= scale.rounds
        tokens = sum(len(s.response_ids) for s in samples)
        row[f"{key}_tok_s"] = tokens / t
        row[f"{key}_graph_captures_timed"] = captures[0]  # 0: the warm-up's graphs were replayed
        row[f"{key}_kv_entries_per_step"] = reads["entries"] / max(1, reads["steps"])
        if bandwidth:
            limit = bandwidth_limit(tokens, reads, wbytes, tbytes, bandwidth)
            row[f"{key}_limit"] = limit
            row[f"{key}_bandwidth_fraction"] = row[f"{key}_tok_s"] / limit["bandwidth_limit_tok_s"]
        return samples

    def setup(b: int):
        prompts = _prompts(tok, b, scale.prompt_len, seed=b)
        return prompts, SamplingConfig(max_new_tokens=n, batch_size=b, seed=0, logit_bias={tok.eos_token_id: NEG})

    graph_samples = {}
    for b in scale.batches:  # the cheapest and the headline figures first
        deadline.check(f"the engine at batch {b}")
        row = part.setdefault(str(b), {})
        prompts, sampling = setup(b)
        engine = Engine(model, tok, "parallel_r1", "causal", decode="static")
        engine.generate(prompts, sampling)  # warm-up: captures the graphs of its buckets
        graph_samples[b] = timed_engine(row, "engine", engine, prompts, sampling)
        # the mean live KV per step (prompt + the tokens so far) against the window read
        row["live_kv_entries_per_step"] = b * (scale.prompt_len + (n - 1) / 2)
        engine.release()
        print(f"[gpu_check] qwen3_4b decode b={b}: {row}", flush=True)
    b = scale.headline_batch
    row, (prompts, sampling) = part[str(b)], setup(b)
    deadline.check("the engine without graphs")
    plain = Engine(model, tok, "parallel_r1", "causal", decode="static", cuda_graphs=False)
    plain.generate(prompts, sampling)
    same = timed_engine(row, "no_graphs", plain, prompts, sampling)
    row["no_graphs_same_tokens"] = [s.response_ids for s in same] == [s.response_ids for s in graph_samples[b]]
    row["graphs_speedup"] = row["engine_tok_s"] / row["no_graphs_tok_s"]
    deadline.check("the paged cache")
    budget = paged_budget(b, scale.prompt_len, n, tbytes)
    paged = Engine(model, tok, "parallel_r1", "causal", kv_cache_bytes=budget)
    # The paged step is captured as a CUDA graph per (rows, window) bucket, as the contiguous one: warm them up first,
    # so that the timed call replays graphs rather than capturing them.
    paged.generate(prompts, sampling)
    deadline.check("the paged cache, timed")
    same = timed_engine(row, "paged", paged, prompts, sampling)
    row["paged_kv_cache_bytes"] = budget
    row["paged_stats"] = dict(paged.stats)
    # other shapes than the graphs', so in bf16 other rounding: a share, as decode_check's graphs vs eager
    row["paged_same_samples"] = sum(x.response_ids == y.response_ids
                                    for x, y in zip(same, graph_samples[b])) / len(same)
    for b in scale.batches:  # transformers' generate: the slowest runs last
        deadline.check(f"generate at batch {b}")
        row, (prompts, _) = part[str(b)], setup(b)
        ids = torch.tensor(prompts, device=device)
        kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                  cache_implementation="static", disable_compile=True, pad_token_id=tok.pad_token_id)
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        t, _ = _timed(lambda: model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw), device, scale.rounds)
        row["generate_tok_s"] = b * n / t
        row["engine_over_generate"] = row["engine_tok_s"] / row["generate_tok_s"]
        if "engine_limit" in row:
            row["generate_bandwidth_fraction"] = row["generate_tok_s"] / row["engine_limit"]["bandwidth_limit_tok_s"]


# ------------------------------------------------------------------------------------------------------- probe


def probe(part: dict, deadline, bench: Bench) -> None:
    """A gate's probe-sized engine call under the KV budget ``quality.probe`` gives it
    (``memory_model.probe_kv_bytes``: the probe's kv_cache part of the plan): 256 rows, the budget of 3,000 new
    tokens, fewer tokens sampled (the budget's pool is allocated whole when the call starts). Its peak against
    ``probe_budget``'s estimate, which counts the weights, the engine's workspaces and the pool. Before issue 47 the
    probe had no budget: 256 rows x 5,049 tokens of contiguous cache (~190 GB for Qwen3-4B)."""
    model, tok = bench.need_model()
    scale, device = bench.scale, bench.device
    spec = {"batch_size": scale.probe_rows, "k": 4, "max_new_tokens": scale.probe_budget_tokens, "mode": "causal",
            "num_paths": 2}
    arch = memory_model.Arch.from_cfg(model.config.to_dict())
    budget = memory_model.probe_budget(arch, 2, spec, capacity(device))
    kv = memory_model.probe_kv_bytes(spec, model.config.to_dict(), "bfloat16", capacity(device))
    deadline.check("the probe call")
    peak = PeakMemory(device)
    engine = Engine(model, tok, "parallel_r1", "causal", kv_cache_bytes=kv)
    prompts = _prompts(tok, scale.probe_rows // 4, scale.prompt_len)
    sampling = SamplingConfig(max_new_tokens=scale.probe_new_tokens, batch_size=scale.probe_rows, seed=0,
                              logit_bias={tok.eos_token_id: NEG})
    t, samples = _timed(lambda: engine.generate(prompts, sampling, 4), device)
    peak.end("probe")
    part.update(rows=len(samples), kv_cache_bytes=kv, kv_cache_gib=round(kv / GIB, 3), seconds=t,
                tokens=sum(len(s.response_ids) for s in samples), stats=dict(engine.stats),
                unbudgeted_worst_case_gib=round(scale.probe_rows * (2048 + scale.probe_budget_tokens + 1)
                                                * model_kv_bytes_per_token(model.config, "bfloat16") / GIB, 1),
                memory=peak.figures(budget.estimate))
    engine.release()


def paged(part: dict, deadline, bench: Bench) -> None:
    """Paged decode at 128 rows x 2,000 tokens under a tight budget (half of what every row to its end needs):
    streams wait for blocks and are preempted and recomputed, each step gathers its rows' blocks. Its tokens/s, the
    preemptions, and the peak against the engine's counted parts (``memory_model.engine_workspace`` beside the
    budget and the weights)."""
    model, tok = bench.need_model()
    scale, device = bench.scale, bench.device
    tbytes = model_kv_bytes_per_token(model.config, "bfloat16")
    rows, n = scale.paged_rows, scale.paged_tokens
    kv = paged_budget(rows, scale.prompt_len, n, tbytes) // 2
    arch = memory_model.Arch.from_cfg(model.config.to_dict())
    max_len = scale.prompt_len + n + 1
    estimate = (weight_bytes(model) + kv + memory_model.engine_workspace(arch, 2, rows, max_len, rows, scale.prompt_len)
                + (memory_model.WORKSPACE if device == "cuda" else 0))
    deadline.check("the paged call")
    peak = PeakMemory(device)
    engine = Engine(model, tok, "parallel_r1", "causal", kv_cache_bytes=kv)
    prompts = _prompts(tok, rows, scale.prompt_len, seed=7)
    sampling = SamplingConfig(max_new_tokens=n, batch_size=rows, seed=0, logit_bias={tok.eos_token_id: NEG})
    t, samples = _timed(lambda: engine.generate(prompts, sampling), device)
    peak.end("paged")
    tokens = sum(len(s.response_ids) for s in samples)
    part.update(rows=rows, new_tokens=n, kv_cache_bytes=kv, tok_s=tokens / t, seconds=t, tokens=tokens,
                stats=dict(engine.stats), all_to_their_end=tokens == rows * n, memory=peak.figures(estimate))
    engine.release()


# ------------------------------------------------------------------------------------------------------- SFT


def structured_trace(tok, length: int, seed: int) -> dict:
    """A parallel_r1 training sequence of exactly ``length`` tokens: a prompt, then blocks of two paths and a
    summary between stretches of text, in the collator's feature format."""
    ids, rng = _regular_ids(tok), random.Random(seed)
    tag = tok.convert_tokens_to_ids
    text = lambda k: [rng.choice(ids) for _ in range(k)]  # noqa: E731
    prompt = text(min(64, length // 4))
    seq = list(prompt)
    block = max(8, length // 16)
    while True:
        piece = text(block) + [tag("<Parallel>")]
        for _ in range(2):
            piece += [tag("<Path>"), *text(block), tag("</Path>")]
        piece += [tag("</Parallel>"), tag("<Summary>"), *text(block // 2), tag("</Summary>")]
        if len(seq) + len(piece) > length:
            break
        seq += piece
    seq += text(length - len(seq))
    return {"input_ids": seq, "n_prompt": len(prompt), "ignore": []}


def matmul_params(model) -> int:
    """Parameters that enter a matrix product per token: every 2-D weight but the input embedding, plus the
    output layer (the embedding itself when tied)."""
    body = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n)
    head = model.get_output_embeddings().weight
    tied = head is model.get_input_embeddings().weight
    return body + (head.numel() if tied else 0)


def sft_estimate(arch: memory_model.Arch, length: int, checkpointing: bool, chunk: int) -> dict[str, int]:
    """The memory model's parts of this section's step (not a stage's: bf16 weights and torch's AdamW, whose
    moments are bf16 too; no masters): weights, grads and moments 2 + 2 + 4 bytes a parameter, one structured
    sequence's activations, one logits chunk, the workspace."""
    p = arch.params
    return {"weights": 2 * p, "grads": 2 * p, "optimizer": 4 * p,
            "activations": memory_model.training_activations(arch, 2, 1, length, checkpointing, mask="additive"),
            "logits": memory_model.logits_bytes(arch, 2, chunk), "workspace": memory_model.WORKSPACE}


def sft_loss(model, batch: dict, chunk: int) -> torch.Tensor:
    """The SFT stage's loss (``SFTTrainer.compute_loss``): mean token NLL from the final hidden states through
    lm_head ``chunk`` tokens at a time, no [L, V] tensor whole."""
    from parathink.modeling.chunked import causal_lm_nll

    nll, count = causal_lm_nll(model, batch, chunk, IGNORE)
    return nll / count


def sft(part: dict, deadline, bench: Bench) -> None:
    """Structured-collator SFT steps: tokens/s and MFU (6 N + 12 L H D T FLOPs per token, the attention over the
    whole sequence as the kernel computes it with a 4-D mask); peak memory against the memory model's parts."""
    from parathink.formats.layouts import TagIds
    from parathink.training.checkpointing import enable_checkpointing
    from parathink.training.sft import StructuredCollator

    model, tok = bench.need_model()
    scale, device, chunk = bench.scale, bench.device, 1024
    collate = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"), dtype=torch.bfloat16)
    batch = collate([structured_trace(tok, scale.sft_len, seed=0)])
    tokens = int(batch.pop("n_tokens"))
    batch = {k: v.to(device) for k, v in batch.items()}
    part["attention"] = sdpa_kernels(model, batch)
    arch = memory_model.Arch.from_cfg(model.config.to_dict())
    parts = sft_estimate(arch, scale.sft_len, False, chunk)
    checkpointing = sum(parts.values()) > SFT_CHECKPOINT_ABOVE * capacity(device)
    if checkpointing:  # stays on for this model: later sections only decode with it
        enable_checkpointing(model)
        parts = sft_estimate(arch, scale.sft_len, True, chunk)
    deadline.check("the steps")
    memory = PeakMemory(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=device == "cuda")

    def step():
        sft_loss(model, batch, chunk).backward()
        opt.step()  # noqa: F821  (the del in finally comes after every call)
        opt.zero_grad(set_to_none=True)  # noqa: F821

    try:
        step()  # warm-up: the optimiser's state, the kernels' choices
        memory.end("first_step")
        deadline.check("the timed steps")
        seconds, _ = _timed(lambda: [step() for _ in range(scale.sft_steps)], device)
        seconds /= scale.sft_steps
        memory.end("timed_steps")
    finally:
        del opt
        model.zero_grad(set_to_none=True)
        model.eval()
    cfg = model.config
    attention = 12 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * scale.sft_len
    flops = 6 * matmul_params(model) + attention
    part.update(sequence=scale.sft_len, tokens_per_step=tokens, step_s=seconds, tokens_per_s=tokens / seconds,
                flops_per_token=flops, tflops=tokens / seconds * flops / 1e12, gradient_checkpointing=checkpointing,
                mfu=tokens / seconds * flops / BF16_DENSE_PEAK if device == "cuda" else None)
    part["memory"] = memory.figures(sum(parts.values())) | {"parts_gib": _gib(parts)}


def _gib(parts: dict[str, int]) -> dict[str, float]:
    return {k: round(v / GIB, 3) for k, v in parts.items()}


def sdpa_kernels(model, batch: dict) -> dict:
    """Which scaled-dot-product-attention kernel runs with the batch's 4-D mask: the profiler's kernel names (on a
    GPU) or operator names (on a CPU) of one forward."""
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad(), profile(activities=activities) as prof:
        model(**inputs, logits_to_keep=1)
        if device.type == "cuda":
            torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events()})
    keys = ("flash", "fmha", "efficient_attention", "cudnn", "scaled_dot_product", "attention")
    hits = [n for n in names if any(k in n.lower() for k in keys)]
    low = " ".join(hits).lower()
    kernel = ("flash" if "flash" in low and "for_cpu" not in low else "efficient" if "fmha" in low or "efficient" in low
              else "cudnn" if "cudnn" in low else "cpu flash (masked)" if "for_cpu" in low else "math")
    return {"kernel": kernel, "names": hits[:8]}


# ------------------------------------------------------------------------------------------------------- fork


def fork(part: dict, deadline, bench: Bench) -> None:
    """bench_engine's fork speed-up (K paths as rows against one stream writing the same tokens), one K at a time."""
    model, tok = bench.need_model()
    for k in bench.scale.fork_ks:
        deadline.check(f"K={k}")
        got = wall_times(bench_engine.fork_speedups(model, tok, [k], bench.scale.path_len, bench.scale.rounds,
                                                    _sync(bench.device)))
        part.setdefault("fork_speedup", {}).update(got["fork_speedup"])
        part.setdefault("fork_detail", {}).update(got["fork_detail"])
        part["fork_path_tokens"] = got["fork_path_tokens"]


# ------------------------------------------------------------------------------------------------------- RL


def rl_config(scale: Scale, kv_cache_gib: float):
    from parathink.config.rl import RLConfig

    return RLConfig(init_from="-", mode="structured", num_paths=2, prompts_per_step=scale.rl_prompts,
                    group_size=scale.rl_group, token_budget=scale.prompt_len + scale.rl_new_tokens,
                    rollout_batch_size=scale.rl_rows, micro_batch_size=scale.rl_micro, gradient_checkpointing=True,
                    logprob_chunk_tokens=1024, kv_cache_gib=kv_cache_gib, lr=1e-6, eps_high=0.2)


def rl_shape(scale: Scale, device_bytes: int):
    """(layers, RLConfig, the memory model's Budget): Qwen3-4B's width and vocabulary with the most of its layers
    whose step the memory model puts within RL_TARGET_GIB. The KV budget is the rollout's contiguous cache (every
    row at its longest, rounded up to a MiB), so the engine allocates what the estimate counts."""
    arch = memory_model.Arch.from_cfg({**scale.arch, "vocab_size": scale.vocab})
    rows = min(scale.rl_prompts * scale.rl_group, scale.rl_rows) * 2  # structured: two paths a stream
    for layers in range(arch.layers, 0, -1):
        shape = dataclasses.replace(arch, layers=layers)
        token_bytes = kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2)
        kv = rows * (scale.prompt_len + scale.rl_new_tokens + 1) * token_bytes
        cfg = rl_config(scale, math.ceil(kv / 2**20) / 1024)
        budget = memory_model.rl_budget(shape, 2, cfg, "gpu_check_rl", 1, device_bytes)
        if budget.estimate <= RL_TARGET_GIB * GIB:
            return layers, cfg, budget
    raise RuntimeError(f"no layer count of this width fits {RL_TARGET_GIB} GiB")


def rl(part: dict, deadline, bench: Bench) -> None:
    """One step of ``parathink.training.rl`` as its setup builds it (fp32 masters of bf16 weights, checkpointing,
    the engine's KV budget): sample_step, assemble, update twice (engine old log-probs, then
    ``old_logprobs=recompute``). The reward is a coin flip per rollout, so every group has an advantage."""
    from accelerate import Accelerator

    from parathink.training.checkpointing import enable_checkpointing
    from parathink.training.master_weights import to_half_keeping_masters
    from parathink.training.rl import Problem, build_optimizer, sample_step, update
    from parathink.training.rl_rollouts import StepBatch, assemble

    bench.free_model()  # the step is measured alone on the device
    scale, device = bench.scale, bench.device
    layers, cfg, budget = rl_shape(scale, capacity(device))
    part.update(layers=layers, params=memory_model.Arch.from_cfg(
        {**scale.arch, "vocab_size": scale.vocab, "num_hidden_layers": layers}).params,
        rollouts=cfg.prompts_per_step * cfg.group_size, token_budget=cfg.token_budget, kv_cache_gib=cfg.kv_cache_gib)
    memory = PeakMemory(device)
    model, tok = new_model({**scale.arch, "num_hidden_layers": layers}, scale.vocab, device, torch.float32)
    masters = to_half_keeping_masters(model, torch.bfloat16)
    enable_checkpointing(model)
    optimizer, scheduler = build_optimizer(model, cfg, masters)
    del masters
    engine = Engine(model, tok, "parallel_r1", cfg.mode, cfg.num_paths, cuda_graphs=cfg.cuda_graphs,
                    kv_cache_bytes=memory_model.engine_kv_bytes(  # as rl.setup sizes it; None on the CPU dry run
                        cfg, "gpu_check_rl", model.config.to_dict(), "bfloat16",
                        capacity(device) if device == "cuda" else None, 1))
    problems = [Problem(id=str(i), prompt_ids=p, answer="7")
                for i, p in enumerate(_prompts(tok, scale.rl_prompts, scale.prompt_len, seed=3))]
    coin = random.Random(0)
    accelerator = Accelerator(cpu=device != "cuda")
    memory.end("setup")
    try:
        deadline.check("the rollout")
        t = time.perf_counter()
        with counting_captures() as captures:
            rollouts = sample_step(engine, problems, cfg, lambda trace, correct, step: coin.choice((-1.0, 1.0)),
                                   "parallel_r1", step=1, seed=0)
        part["rollout_s"] = _elapsed(t, device)
        memory.end("rollout")
        part["graph_captures"] = captures[0]  # a first step captures its buckets; later steps replay them
        part["engine_stats"] = dict(engine.stats)
        part["generated_tokens"] = sum(r.n_tokens for r in rollouts)
        part["rollout_tok_s"] = part["generated_tokens"] / part["rollout_s"]
        batch = assemble(rollouts, cfg.group_size, cfg.advantage, False, False)
        for old in ("engine", "recompute"):
            deadline.check(f"the update with old_logprobs={old}")
            t = time.perf_counter()
            stats = update(accelerator, model, None, engine, optimizer, scheduler,
                           StepBatch(rollouts=batch.rollouts, all_rollouts=rollouts),
                           dataclasses.replace(cfg, old_logprobs=old))
            part[f"update_{old}_s"] = _elapsed(t, device)
            memory.end(f"update_{old}")
            part[f"update_{old}_loss"] = stats["loss"]
        part["step_s"] = part["rollout_s"] + part["update_engine_s"]
    finally:
        part["memory"] = memory.figures(budget.estimate) | {"parts_gib": budget.to_dict()["parts"],
                                                            "note": budget.note}
        engine.release()
        del optimizer, engine, model
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def _elapsed(t: float, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


# ------------------------------------------------------------------------------------------------------- headline


def headline(record: dict, scale: Scale) -> dict:
    """The figures that runs on different days compare, under fixed names, with their targets."""
    row = record.get("decode", {}).get(str(scale.headline_batch), {})
    return {"headline_batch": scale.headline_batch,
            "engine_bandwidth_fraction_b64": row.get("engine_bandwidth_fraction"),
            "engine_over_generate_b64": row.get("engine_over_generate"),
            "graphs_speedup_b64": row.get("graphs_speedup"),
            "sft_mfu_4096": record.get("sft", {}).get("mfu"),
            "fork_speedup_16": record.get("fork", {}).get("fork_speedup", {}).get("16"),
            "rl_measured_over_estimate": record.get("rl", {}).get("memory", {}).get("measured_over_estimate"),
            "targets": {"engine_bandwidth_fraction_b64": 0.30, "engine_over_generate_b64": 3.0, "sft_mfu_4096": 0.35,
                        "rl_measured_over_estimate": [0.75, 1.0]}}

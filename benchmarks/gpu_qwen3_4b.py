"""The ``qwen3_4b`` section of gpu_check: every GPU stage's cost at the real model size (issue 22).

Qwen3-4B-Base's architecture with random weights in bf16 on one GPU (speed does not depend on the weights), with
its vocabulary size (151,936); the toy tokenizer supplies the grammar's tag ids (ids it does not know decode to
nothing). Each part fills its piece of the record as it goes, under its own time box (``box``, from
gpu_check), so one failure or slowness leaves the others:

- ``ceilings``: the GPU's memory bandwidth (a large device copy: bytes read + written over the time) and its bf16
  matrix rate, measured in the same call as what they bound.
- ``decode_check``: before anything is timed, the engine's CUDA-graph decode against the same decode without
  graphs (same seed, forks included: the same tokens and log-probs) and against the eager one; and the host syncs
  of a decode step (none) and of a whole step (one: the sampled tokens), counted by CUDA's sync debug mode.
- ``decode``: tokens/s at each batch for the engine and for transformers' ``generate`` with its static cache
  (compilation off: its auto-compile recompiles per batch for minutes), each as a fraction of the bandwidth limit
  (batch x bandwidth / weight bytes read per step); the engine without graphs at the headline batch.
- ``sft``: tokens/s and MFU of the structured collator's batch (4-D mask, restarted positions) at ``sft_len``
  tokens, bf16 weights and AdamW; which SDPA kernel runs with the 4-D mask (read from the profiler).
- ``fork``: bench_engine's fork speed-ups (K paths decoded as rows against one stream).
- ``rl``: one RL step (64 prompts x 8, 1,024 new tokens): the rollout, then the update with the engine's old
  log-probs and again with ``old_logprobs=recompute``, through ``parathink.training.rl`` itself.
Every part records its peak GPU memory. ``Scale`` holds the sizes: the real ones, and toy ones with which
``--device cpu`` runs the same code in CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
import warnings
from dataclasses import dataclass

import bench_engine
import torch

from parathink.engine import Engine, SamplingConfig
from parathink.engine import decode as decode_module
from parathink.engine.decode import StaticDecode
from parathink.engine.toy import toy_model

# Qwen3-4B-Base's config.json.
QWEN3_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                max_position_embeddings=40960, tie_word_embeddings=True)
TOY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           head_dim=16, rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=8192,
           tie_word_embeddings=True)
BF16_DENSE_PEAK = 989.4e12  # H100/H200 SXM datasheet, dense bf16: the denominator of MFU
NEG = float("-inf")


@dataclass(frozen=True)
class Scale:
    arch: dict
    vocab: int
    batches: tuple[int, ...]  # decode batches; ``headline_batch`` is one of them
    headline_batch: int
    prompt_len: int
    new_tokens: int  # per decode timing
    rounds: int  # timed repeats (best kept) after one warm-up
    fork_ks: tuple[int, ...]
    path_len: int
    sft_len: int
    sft_steps: int
    rl_prompts: int
    rl_group: int
    rl_new_tokens: int
    rl_rows: int  # the engine's rollout batch (rows)
    rl_micro: int  # rollouts per forward/backward
    copy_mib: int  # the bandwidth copy
    matmul: int  # the matrix-rate product's size


GPU = Scale(arch=QWEN3_4B, vocab=151_936, batches=(1, 16, 64, 256), headline_batch=64, prompt_len=32,
            new_tokens=256, rounds=2, fork_ks=(2, 4, 8, 16), path_len=32, sft_len=4096, sft_steps=3, rl_prompts=64,
            rl_group=8, rl_new_tokens=1024, rl_rows=256, rl_micro=8, copy_mib=4096, matmul=8192)
QUICK = dataclasses.replace(GPU, rounds=1, sft_steps=2)
DRY = Scale(arch=TOY, vocab=1000, batches=(1, 2, 4), headline_batch=4, prompt_len=8, new_tokens=8, rounds=1,
            fork_ks=(2, 4), path_len=4, sft_len=128, sft_steps=1, rl_prompts=2, rl_group=2, rl_new_tokens=8,
            rl_rows=4, rl_micro=2, copy_mib=16, matmul=256)


def run(scale: Scale, device: str, box) -> dict:
    """The whole section: ``box(part, seconds, fn)`` runs ``fn(part)`` under a time box and records into ``part``."""
    model, tok = build(scale, device)
    out: dict = {"model": "Qwen3-4B architecture, random weights" if scale.arch is QWEN3_4B else "toy architecture",
                 "dtype": "bfloat16", "vocab": scale.vocab, "params": sum(p.numel() for p in model.parameters()),
                 "weight_bytes_per_step": weight_bytes(model), "scale": dataclasses.asdict(scale)}
    parts = [("ceilings", 30, lambda p: ceilings(p, scale, device)),
             ("decode_check", 60, lambda p: decode_check(p, model, tok, scale.prompt_len,
                                                         max(24, scale.new_tokens // 4))),
             ("decode", 120, lambda p: decode_speeds(p, model, tok, scale, out)),
             ("sft", 60, lambda p: sft(p, model, tok, scale)),
             ("fork", 45, lambda p: p.update(wall_times(bench_engine.fork_speedups(
                 model, tok, list(scale.fork_ks), scale.path_len, 2, _sync(device))))),
             ("rl", 170, lambda p: rl_step(p, model, tok, scale))]
    for name, seconds, fn in parts:
        box(out.setdefault(name, {}), seconds, fn)
    out["headline"] = headline(out, scale)
    return out


def build(scale: Scale, device: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = toy_model(steps=0)
    cfg = Qwen3Config(vocab_size=scale.vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      **scale.arch)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):  # initialised where it runs: 4B parameters on a CPU take minutes
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
    out = {}
    for k, v in figures.items():
        if "cpu" not in k:
            out[k] = wall_times(v) if isinstance(v, dict) else v
    return out


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else None


def _timed(fn, device: str, rounds: int = 1) -> float:
    """Best wall time of ``rounds`` calls, the device synchronised around each."""
    best = float("inf")
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


# ------------------------------------------------------------------------------------------------------- ceilings


def ceilings(part: dict, scale: Scale, device: str) -> None:
    n = scale.copy_mib * 2**20 // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_(-1, 1)  # never zeros: see METHOD.md
    dst = torch.empty_like(src)
    dst.copy_(src)
    # (ruff reads the del below as unbinding the names the closure uses; it runs before.)
    t = _timed(lambda: [dst.copy_(src) for _ in range(5)], device, 3) / 5  # noqa: F821
    part["bandwidth_gb_s"] = 2 * src.numel() * src.element_size() / t / 1e9  # read + written
    del src, dst
    a = torch.randn(scale.matmul, scale.matmul, dtype=torch.bfloat16, device=device)
    b = torch.randn_like(a)
    a @ b
    t = _timed(lambda: [a @ b for _ in range(5)], device, 3) / 5
    part["matmul_tflops"] = 2 * scale.matmul**3 / t / 1e12


# ------------------------------------------------------------------------------------------------------- decode


def _regular_ids(tok) -> list[int]:
    """The tokenizer's ids that are neither special nor a grammar's tag."""
    from parathink.formats.tags import TAGS

    special = set(tok.all_special_ids) | {tok.convert_tokens_to_ids(t) for g in TAGS.values() for t in g}
    return [i for i in range(len(tok)) if i not in special]


def _prompts(tok, n: int, length: int, seed: int = 0) -> list[list[int]]:
    ids, rng = _regular_ids(tok), random.Random(seed)
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def decode_check(part: dict, model, tok, prompt_len: int, new_tokens: int) -> None:
    """The CUDA-graph decode samples what the same decode without graphs samples; no host sync inside a step."""
    ids = tok.convert_tokens_to_ids
    # Random weights never open a block: a bias makes the opener and the path closer likely, so forks and merges
    # run through the graphs (the reported log-probs stay the raw ones).
    sampling = SamplingConfig(max_new_tokens=new_tokens, batch_size=8, seed=1,
                              logit_bias={ids("<Parallel>"): 10.0, ids("</Path>"): 8.0})
    prompts = _prompts(tok, 8, prompt_len, seed=1)
    runs = {}
    for name, kw in (("graphs", {"decode": "static"}), ("static", {"decode": "static", "cuda_graphs": False}),
                     ("eager", {"decode": "eager"})):
        runs[name] = Engine(model, tok, "parallel_r1", "structured", **kw).generate(prompts, sampling)
    g, s, e = runs["graphs"], runs["static"], runs["eager"]
    part["forks"] = sum(x.num_blocks for x in g)
    part["tokens"] = sum(len(x.response_ids) for x in g)
    part["graphs_vs_static_same_tokens"] = [x.response_ids for x in g] == [x.response_ids for x in s]
    part["graphs_vs_static_max_logprob_diff"] = _common_prefix_gap(g, s)
    part["graphs_vs_eager_same_samples"] = sum(x.response_ids == y.response_ids for x, y in zip(g, e)) / len(g)
    part["graphs_vs_eager_max_logprob_diff"] = _common_prefix_gap(g, e)  # bf16: other shapes, other rounding
    if next(model.parameters()).device.type == "cuda":
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


def decode_speeds(part: dict, model, tok, scale: Scale, out: dict) -> None:
    """Engine and ``generate`` tokens/s per batch, against the bandwidth limit of the weights."""
    device = next(model.parameters()).device.type
    bandwidth = out.get("ceilings", {}).get("bandwidth_gb_s")
    n = scale.new_tokens
    for b in scale.batches:
        prompts = _prompts(tok, b, scale.prompt_len, seed=b)
        row: dict = {}
        part[str(b)] = row
        sampling = SamplingConfig(max_new_tokens=n, batch_size=b, seed=0, logit_bias={tok.eos_token_id: NEG})
        engine = Engine(model, tok, "parallel_r1", "causal")
        engine.generate(prompts, sampling)  # warm-up: captures the graphs of its buckets
        with counting_captures() as captures:
            row["engine_tok_s"] = b * n / _timed(lambda: engine.generate(prompts, sampling), device, scale.rounds)
        row["graph_captures_timed"] = captures[0]  # 0: the warm-up's graphs were replayed
        if b == scale.headline_batch:
            plain = Engine(model, tok, "parallel_r1", "causal", decode="static", cuda_graphs=False)
            row["engine_no_graphs_tok_s"] = b * n / _timed(lambda: plain.generate(prompts, sampling), device)
        ids = torch.tensor(prompts, device=device)
        kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                  cache_implementation="static", disable_compile=True, pad_token_id=tok.pad_token_id)
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        t = _timed(lambda: model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw), device, scale.rounds)
        row["generate_tok_s"] = b * n / t
        row["engine_over_generate"] = row["engine_tok_s"] / row["generate_tok_s"]
        if bandwidth:
            limit = b * bandwidth * 1e9 / out["weight_bytes_per_step"]
            row["bandwidth_limit_tok_s"] = limit
            row["engine_bandwidth_fraction"] = row["engine_tok_s"] / limit
            row["generate_bandwidth_fraction"] = row["generate_tok_s"] / limit
        print(f"[gpu_check] qwen3_4b decode b={b}: {row}", flush=True)


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


def sft(part: dict, model, tok, scale: Scale) -> None:
    """Structured-collator SFT steps: tokens/s and MFU (6 N + 12 L H D T FLOPs per token, the attention over the
    whole sequence as the kernel computes it with a 4-D mask)."""
    from parathink.formats.layouts import TagIds
    from parathink.training.sft import StructuredCollator

    device = next(model.parameters()).device
    collate = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"), dtype=torch.bfloat16)
    batch = collate([structured_trace(tok, scale.sft_len, seed=0)])
    tokens = int(batch.pop("n_tokens"))
    batch = {k: v.to(device) for k, v in batch.items()}
    part["attention"] = sdpa_kernels(model, batch)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=device.type == "cuda")

    def step():
        model(**batch).loss.backward()
        opt.step()  # noqa: F821  (the del in finally comes after every call)
        opt.zero_grad(set_to_none=True)  # noqa: F821

    try:
        step()  # warm-up: the optimiser's state, the kernels' choices
        seconds = _timed(lambda: [step() for _ in range(scale.sft_steps)], device.type) / scale.sft_steps
    finally:
        del opt
        model.zero_grad(set_to_none=True)
        model.eval()
    cfg = model.config
    attention = 12 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * scale.sft_len
    flops = 6 * matmul_params(model) + attention
    part.update(sequence=scale.sft_len, tokens_per_step=tokens, step_s=seconds, tokens_per_s=tokens / seconds,
                flops_per_token=flops, tflops=tokens / seconds * flops / 1e12,
                mfu=tokens / seconds * flops / BF16_DENSE_PEAK if device.type == "cuda" else None)


def sdpa_kernels(model, batch: dict) -> dict:
    """Which scaled-dot-product-attention kernel runs with the batch's 4-D mask: the profiler's kernel names (on a
    GPU) or operator names (on a CPU) of one forward."""
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad(), profile(activities=activities) as prof:
        model(**inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events()})
    keys = ("flash", "fmha", "efficient_attention", "cudnn", "scaled_dot_product", "attention")
    hits = [n for n in names if any(k in n.lower() for k in keys)]
    low = " ".join(hits).lower()
    kernel = ("flash" if "flash" in low and "for_cpu" not in low else "efficient" if "fmha" in low or "efficient" in low
              else "cudnn" if "cudnn" in low else "cpu flash (masked)" if "for_cpu" in low else "math")
    return {"kernel": kernel, "names": hits[:8]}


# ------------------------------------------------------------------------------------------------------- RL


def rl_step(part: dict, model, tok, scale: Scale) -> None:
    """One step of ``parathink.training.rl``: sample_step, assemble, update (twice: engine old log-probs, then
    ``old_logprobs=recompute``). The reward is a coin flip per rollout, so every group has an advantage."""
    from accelerate import Accelerator

    from parathink.training.rl import Problem, build_optimizer, sample_step, update
    from parathink.training.rl_config import RLConfig
    from parathink.training.rl_rollouts import StepBatch, assemble

    device = next(model.parameters()).device
    cfg = RLConfig(init_from="-", mode="structured", num_paths=2, prompts_per_step=scale.rl_prompts,
                   group_size=scale.rl_group, token_budget=scale.prompt_len + scale.rl_new_tokens,
                   rollout_batch_size=scale.rl_rows, micro_batch_size=scale.rl_micro, lr=1e-7, eps_high=0.2)
    problems = [Problem(id=str(i), prompt_ids=p, answer="7")
                for i, p in enumerate(_prompts(tok, scale.rl_prompts, scale.prompt_len, seed=3))]
    coin = random.Random(0)
    accelerator = Accelerator(cpu=device.type != "cuda")
    optimizer, scheduler = build_optimizer(model, cfg)
    engine = Engine(model, tok, "parallel_r1", cfg.mode, cfg.num_paths)
    try:
        t = time.perf_counter()
        with counting_captures() as captures:
            rollouts = sample_step(engine, problems, cfg, lambda trace, correct, step: coin.choice((-1.0, 1.0)),
                                   "parallel_r1", step=1, seed=0)
        part["rollout_s"] = _elapsed(t, device.type)
        part["graph_captures"] = captures[0]  # a first step captures its buckets; later steps replay them
        part["rollouts"] = len(rollouts)
        part["generated_tokens"] = sum(r.n_tokens for r in rollouts)
        part["rollout_tok_s"] = part["generated_tokens"] / part["rollout_s"]
        part["rollout_peak_gpu_mem_gb"] = _peak_gb(reset=True)
        batch = assemble(rollouts, cfg.group_size, cfg.advantage, False, False)
        for old in ("engine", "recompute"):
            step_cfg = dataclasses.replace(cfg, old_logprobs=old)
            t = time.perf_counter()
            stats = update(accelerator, model, None, engine, optimizer, scheduler,
                           StepBatch(rollouts=batch.rollouts, all_rollouts=rollouts), step_cfg)
            part[f"update_{old}_s"] = _elapsed(t, device.type)
            part[f"update_{old}_peak_gpu_mem_gb"] = _peak_gb(reset=True)
            part[f"update_{old}_loss"] = stats["loss"]
        part["step_s"] = part["rollout_s"] + part["update_engine_s"]
        part["step_recompute_s"] = part["rollout_s"] + part["update_recompute_s"]
    finally:
        del optimizer
        model.zero_grad(set_to_none=True)
        model.eval()


def _elapsed(t: float, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def _peak_gb(reset: bool = False) -> float | None:
    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return peak


# ------------------------------------------------------------------------------------------------------- headline


def headline(out: dict, scale: Scale) -> dict:
    """The figures that runs on different days compare, under fixed names, with their targets."""
    row = out.get("decode", {}).get(str(scale.headline_batch), {})
    return {"headline_batch": scale.headline_batch,
            "engine_bandwidth_fraction_b64": row.get("engine_bandwidth_fraction"),
            "engine_over_generate_b64": row.get("engine_over_generate"),
            "sft_mfu_4096": out.get("sft", {}).get("mfu"),
            "targets": {"engine_bandwidth_fraction_b64": 0.30, "engine_over_generate_b64": 3.0, "sft_mfu_4096": 0.35}}

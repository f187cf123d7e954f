"""Rollout engine benchmark -> bench-results/engine.json (issue 5).

- ``engine_tok_s`` / ``hf_generate_tok_s``: one stream on the tiny model (the shipped ``tiny_base`` when it
  exists, else the tiny config with fresh weights: speed does not depend on the weights), 256 new tokens,
  EOS banned on both sides (``min_new_tokens`` for transformers, a logit bias for the engine).
- ``fork_speedup[K]``: K paths of 128 tokens decoded one after another in one stream (causal mode) over the
  same paths forked from the prompt (structured mode; ParaThinker's grammar, whose block opens the response,
  with the path closers banned so every path runs exactly 128 tokens until the budget closes it).
- ``rollout_tok_s``: an RL-shaped rollout on the same model: ROLLOUT_PROMPTS prompts x ROLLOUT_SAMPLES samples,
  ROLLOUT_TOKENS new tokens each (EOS banned), temperature 1, ROLLOUT_BATCH rows in flight (causal mode).
- ``constrained_*``: the same rollout under a KV budget of CONSTRAINED_FRACTION of what the unbudgeted engine
  allocates (``Engine(kv_cache_bytes=...)``: paged, preempting and recomputing): its throughput, preemptions,
  recomputed tokens, peak KV bytes, and how many sequences it sampled exactly as the unconstrained run did.
- ``paged_vs_contiguous``: the same rollout with the paged cache forced (``kv_layout="paged"``, a budget that holds
  every row's need: no preemption) over the contiguous cache, wall time (``_cpu``: CPU time); target >= 0.85.
- ``fork_kv_peak``: a 4-path block forked after a long prompt, paged: its KV peak in tokens against the prompt held
  once plus the paths (``target_tokens`` adds one block per path) and what copying the prefix into each path held.
- ``vs_previous``: each speed figure over the same figure of the newest earlier result
  (``bench-results/engine-*.json``; every run also keeps its own timestamped copy there), so a slowdown shows.
- ``max_logprob_diff_*``: engine log-probs against the training forward (``recompute_logprobs``), on the toy
  model that writes every grammar (``parathink.testing.toy``), fp32; ``max_logprob_diff_static_*`` for the
  static-shape decode (what a GPU captures as CUDA graphs, run here without the capture).

Timings interleave the compared runs and keep the best of several (the machine is shared); ratios come from
one run. ``python benchmarks/bench_engine.py [--quick]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.testing.toy import prompt_ids, toy_model

ROOT = Path(__file__).resolve().parent.parent
NEG = float("-inf")
ROLLOUT_PROMPTS, ROLLOUT_SAMPLES, ROLLOUT_TOKENS, ROLLOUT_BATCH = 8, 8, 96, 32
CONSTRAINED_FRACTION = 0.25
# Figures compared with the previous run (higher is faster).
SPEED_KEYS = ("engine_tok_s", "engine_tok_per_cpu_s", "rollout_tok_s", "rollout_tok_per_cpu_s",
              "constrained_rollout_tok_s", "constrained_rollout_tok_per_cpu_s", "paged_vs_contiguous")


def tiny_model():
    """The shipped tiny base, or the tiny config (hydra_conf/model/tiny.yaml) with the toy tokenizer."""
    asset = ROOT / "src/parathink/assets/tiny_base"
    if (asset / "config.json").exists():
        from parathink.modeling import load_model

        model, tok = load_model(asset, dtype="float32")
        return model, tok, "tiny_base"
    import yaml
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = toy_model(steps=0)
    arch = yaml.safe_load((ROOT / "hydra_conf/model/tiny.yaml").read_text())["config"]
    cfg = Qwen3Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **arch)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg).eval(), tok, "tiny config, fresh weights"


def best(fns: dict, rounds: int, sync=None) -> dict[str, float]:
    """Interleaved rounds; the best wall time (``k``) and the best process CPU time (``k_cpu``) of each function.

    torch runs on one thread here, so CPU time is the work itself, free of the preemption that other load on
    a shared machine adds to wall time; both are reported.
    """
    out = {k: float("inf") for k in fns} | {f"{k}_cpu": float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            if sync is not None:
                sync()  # a GPU's work is asynchronous: wait for it before reading the clock
            out[k] = min(out[k], time.perf_counter() - t)
            out[f"{k}_cpu"] = min(out[f"{k}_cpu"], time.process_time() - c)
    return out


def one_stream(model, tok, n: int, rounds: int, sync=None) -> dict:
    prompt = tok.encode("Problem: Tom has 12 apples and buys 7 more. How many now?\nSolution:\n",
                        add_special_tokens=False)
    engine = Engine(model, tok, "parallel_r1", "causal")
    sampling = SamplingConfig(max_new_tokens=n, batch_size=1, logit_bias={tok.eos_token_id: NEG})
    ids = torch.tensor([prompt], device=next(model.parameters()).device)

    def ours():
        s = engine.generate([prompt], sampling)[0]
        assert len(s.response_ids) == n, len(s.response_ids)

    def hf():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, max_new_tokens=n,
                             min_new_tokens=n, pad_token_id=tok.pad_token_id)
        assert out.shape[1] - ids.shape[1] == n

    with torch.no_grad():
        ours(), hf()  # warm-up
        t = best({"engine": ours, "hf": hf}, rounds, sync)
    return {"engine_tok_s": n / t["engine"], "hf_generate_tok_s": n / t["hf"],
            "engine_over_hf": t["hf"] / t["engine"], "engine_over_hf_cpu_time": t["hf_cpu"] / t["engine_cpu"],
            "engine_tok_per_cpu_s": n / t["engine_cpu"], "hf_generate_tok_per_cpu_s": n / t["hf_cpu"],
            "one_stream_tokens": n}


def fork_speedups(model, tok, ks: list[int], path_len: int, rounds: int, sync=None) -> dict:
    from parathink.formats.tags import TAGS

    tags = [tok.convert_tokens_to_ids(t) for g in TAGS.values() for t in g]
    closers = [tok.convert_tokens_to_ids(f"</think{i}>") for i in range(1, 17)]
    prompt = tok.encode("Problem: Tom has 12 apples and buys 7 more. How many now?\nSolution:\n",
                        add_special_tokens=False)
    out, out_cpu, detail = {}, {}, {}
    for k in ks:
        total = k * (path_len + 2) + 2  # k paths with open/close tags, then <summary></summary>
        seq = Engine(model, tok, "parathinker", "causal")
        fork = Engine(model, tok, "parathinker", "structured", num_paths=k)
        s_seq = SamplingConfig(max_new_tokens=total, batch_size=1,
                               logit_bias={t: NEG for t in [tok.eos_token_id, *tags]})
        s_fork = SamplingConfig(max_new_tokens=total, batch_size=k,
                                logit_bias={t: NEG for t in [tok.eos_token_id, *closers]})

        def run_seq():
            assert len(seq.generate([prompt], s_seq)[0].response_ids) == total

        def run_fork():
            s = fork.generate([prompt], s_fork)[0]
            assert len(s.response_ids) == total and s.num_blocks == 1, (len(s.response_ids), s.num_blocks)

        with torch.no_grad():
            run_fork()
            t = best({"seq": run_seq, "fork": run_fork}, rounds, sync)
        out[str(k)] = t["seq"] / t["fork"]
        out_cpu[str(k)] = t["seq_cpu"] / t["fork_cpu"]
        detail[str(k)] = {"sequential_s": t["seq"], "forked_s": t["fork"], "sequential_cpu_s": t["seq_cpu"],
                          "forked_cpu_s": t["fork_cpu"], "tokens": total}
    return {"fork_speedup": out, "fork_speedup_cpu_time": out_cpu, "fork_detail": detail,
            "fork_path_tokens": path_len}


def rollout(model, tok, rounds: int, quick: bool, sync=None) -> dict:
    """RL-shaped rollout throughput (response tokens per second of wall and of CPU time), without a KV budget and
    with CONSTRAINED_FRACTION of the cache the unbudgeted call allocates."""
    n_prompts, n_new = (4, 32) if quick else (ROLLOUT_PROMPTS, ROLLOUT_TOKENS)
    prompts = [tok.encode(f"Problem: Tom has {i} apples and buys {i + 7} more. How many now?\nSolution:\n",
                          add_special_tokens=False) for i in range(n_prompts)]
    sampling = SamplingConfig(max_new_tokens=n_new, batch_size=ROLLOUT_BATCH, seed=0,
                              logit_bias={tok.eos_token_id: NEG})
    tokens = n_prompts * ROLLOUT_SAMPLES * n_new
    free = Engine(model, tok, "parallel_r1", "causal")
    out: dict = {}

    def run(engine, key):
        samples = engine.generate(prompts, sampling, num_samples=ROLLOUT_SAMPLES)
        assert sum(len(s.response_ids) for s in samples) == tokens
        out[key] = [s.response_ids for s in samples]

    with torch.no_grad():
        run(free, "free")  # warm-up, and the size of the unbudgeted cache
        worst = free.stats["kv_cache_bytes"]
        tight = Engine(model, tok, "parallel_r1", "causal", kv_cache_bytes=int(worst * CONSTRAINED_FRACTION))
        run(tight, "tight")
        # Timed apart, not interleaved: the unconstrained figure stays comparable with runs before the budget.
        t = best({"rollout": lambda: run(free, "free")}, rounds, sync)
        t |= best({"constrained": lambda: run(tight, "tight")}, rounds, sync)
    stats = tight.stats
    return {"rollout_tok_s": tokens / t["rollout"], "rollout_tok_per_cpu_s": tokens / t["rollout_cpu"],
            "rollout_tokens": tokens, "rollout_rows_in_flight": ROLLOUT_BATCH, "rollout_kv_cache_bytes": worst,
            "constrained_rollout_tok_s": tokens / t["constrained"],
            "constrained_rollout_tok_per_cpu_s": tokens / t["constrained_cpu"],
            "constrained_over_unconstrained": t["rollout"] / t["constrained"],
            "constrained_kv_budget_bytes": int(worst * CONSTRAINED_FRACTION),
            "constrained_kv_cache_bytes": stats["kv_cache_bytes"], "constrained_peak_kv_bytes": stats["peak_kv_bytes"],
            "constrained_preemptions": stats["preemptions"],
            "constrained_recomputed_tokens": stats["recomputed_tokens"],
            "constrained_max_rows_in_flight": stats["max_rows_in_flight"],
            # Sequences whose tokens are the unconstrained run's: all but where a recomputed row's logits (a prefill's
            # rounding, not a decode's) moved a draw that sat within ~1e-6 of a boundary (engine.sampling).
            "constrained_same_sequences": sum(a == b for a, b in zip(out["free"], out["tight"])),
            "constrained_sequences": len(out["free"])}


def paged_layout(model, tok, rounds: int, quick: bool, sync=None) -> dict:
    """The paged KV cache forced (``kv_layout="paged"``) against the contiguous one on the rollout above, with a
    budget that holds every row's actual need (no preemption): what reading KV through block tables costs
    (``paged_vs_contiguous``, wall and CPU time; the contiguous cache's steps view a slice, the paged ones gather
    whole blocks). And a 4-path block forked after a long prompt: its KV peak against the prompt held once plus the
    paths (forks share the prefix's blocks), and what copying the prefix into every path held."""
    from parathink.engine.kv_budget import BLOCK_TOKENS
    from parathink.formats.layouts import TagIds

    n_prompts, n_new = (4, 32) if quick else (ROLLOUT_PROMPTS, ROLLOUT_TOKENS)
    prompts = [tok.encode(f"Problem: Tom has {i} apples and buys {i + 7} more. How many now?\nSolution:\n",
                          add_special_tokens=False) for i in range(n_prompts)]
    sampling = SamplingConfig(max_new_tokens=n_new, batch_size=ROLLOUT_BATCH, seed=0,
                              logit_bias={tok.eos_token_id: NEG})
    contiguous = Engine(model, tok, "parallel_r1", "causal", kv_layout="contiguous")
    probe = Engine(model, tok, "parallel_r1", "causal", kv_layout="paged")
    out: dict = {}

    def run(engine, key):
        out[key] = [s.response_ids for s in engine.generate(prompts, sampling, num_samples=ROLLOUT_SAMPLES)]

    with torch.no_grad():
        run(probe, "probe")  # the blocks the rollout holds at its peak: the budget below holds them all
        need = probe.stats["peak_kv_bytes"] + (ROLLOUT_BATCH + 1) * BLOCK_TOKENS * probe.stats["kv_bytes_per_token"]
        paged = Engine(model, tok, "parallel_r1", "causal", kv_layout="paged", kv_cache_bytes=need)
        run(paged, "paged")
        run(contiguous, "contiguous")
        t = best({"contiguous": lambda: run(contiguous, "contiguous"), "paged": lambda: run(paged, "paged")},
                 rounds, sync)
    figures = {"paged_vs_contiguous": t["contiguous"] / t["paged"],
               "paged_vs_contiguous_cpu": t["contiguous_cpu"] / t["paged_cpu"],
               "paged_kv_budget_bytes": need, "paged_peak_kv_bytes": paged.stats["peak_kv_bytes"],
               "paged_preemptions": paged.stats["preemptions"],
               "paged_same_sequences": sum(a == b for a, b in zip(out["paged"], out["contiguous"])),
               "paged_sequences": len(out["contiguous"])}
    # A 4-path block after a long prompt: the opener's bias forks at once; the budget closes the paths.
    ids = TagIds.from_tokenizer(tok, "parallel_r1").ids
    prompt = tok.encode("Problem: " + " ".join(f"Tom has {i} apples." for i in range(40)) + "\nSolution:\n",
                        add_special_tokens=False)
    engine = Engine(model, tok, "parallel_r1", "structured", num_paths=4, kv_layout="paged")
    fork = SamplingConfig(max_new_tokens=256, seed=0, logit_bias={ids["<Parallel>"]: 100.0, tok.eos_token_id: NEG})
    with torch.no_grad():
        sample = engine.generate([prompt], fork)[0]
    layout = engine.layout(sample)
    prefix = len(prompt) + 1  # the opener is in every path's cache
    paths = int((layout.path_ids[len(prompt):] > 0).sum())
    peak = engine.stats["peak_kv_bytes"] // engine.stats["kv_bytes_per_token"]
    figures["fork_kv_peak"] = {"paths": 4, "blocks": sample.num_blocks, "prefix_tokens": prefix,
                               "path_tokens": paths, "peak_kv_tokens": peak,
                               "target_tokens": prefix + paths + 4 * BLOCK_TOKENS,
                               "prefix_copied_tokens": 4 * prefix + paths, "within_target": peak <= prefix + paths
                               + 4 * BLOCK_TOKENS}
    return figures


def vs_previous(figures: dict) -> dict:
    """Each speed figure over the newest earlier result's (absent when there is none to compare with)."""
    earlier = sorted((ROOT / "bench-results").glob("engine-*.json"))
    if not earlier:
        return {}
    old = json.loads(earlier[-1].read_text())
    ratios = {k: figures[k] / old[k] for k in SPEED_KEYS if k in figures and old.get(k)}
    return {"vs_previous": {"file": earlier[-1].name, **ratios}}


def logprob_diffs(samples_per_prompt: int) -> dict:
    """Per mode, the eager decode (``max_logprob_diff_<mode>``) and the static-shape one a GPU replays as CUDA
    graphs (``max_logprob_diff_static_<mode>``)."""
    model, tok = toy_model()
    figures = {}
    for decode, prefix in (("eager", ""), ("static", "static_")):
        for mode in ("causal", "structured"):
            worst, tokens, blocks = 0.0, 0, 0
            for grammar in ("parallel_r1", "npr", "parathinker"):
                engine = Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2, decode=decode)
                samples = engine.generate([prompt_ids(tok, grammar, i) for i in range(16)],
                                          SamplingConfig(max_new_tokens=96, seed=0), num_samples=samples_per_prompt)
                with torch.no_grad():
                    logp, _ = recompute_logprobs(model, engine, samples)
                for i, s in enumerate(samples):
                    n = len(s.logprobs)
                    worst = max(worst, (logp[i, :n] - torch.tensor(s.logprobs)).abs().max().item())
                    tokens += n
                    blocks += s.num_blocks
            figures[f"max_logprob_diff_{prefix}{mode}"] = worst
            figures[f"logprob_tokens_{prefix}{mode}"] = tokens
            figures[f"logprob_forks_{prefix}{mode}"] = blocks
    return figures


def main() -> None:
    quick = "--quick" in sys.argv
    torch.set_num_threads(1)  # the shared 2-core machine; both sides of every ratio run alike
    model, tok, which = tiny_model()
    # 16 paths of 128 tokens in one stream run past the tiny config's 1024 positions; RoPE has no such limit.
    model.config.max_position_embeddings = max(model.config.max_position_embeddings, 4096)
    figures = {"model": which, "params": sum(p.numel() for p in model.parameters()), "threads": 1}
    figures.update(one_stream(model, tok, 64 if quick else 256, 2 if quick else 4))
    figures.update(fork_speedups(model, tok, [2, 4] if quick else [2, 4, 8, 16], 32 if quick else 128,
                                 1 if quick else 3))
    figures.update(rollout(model, tok, 1 if quick else 3, quick))
    figures.update(paged_layout(model, tok, 1 if quick else 3, quick))
    figures.update(logprob_diffs(2 if quick else 4))
    figures["targets"] = {"engine_over_hf": 2.0, "fork_speedup": {"2": 1.6, "4": 3, "8": 5, "16": 8},
                          "max_logprob_diff": 1e-4, "paged_vs_contiguous": 0.85,
                          "fork_kv_peak": "prefix + 4 paths + one block per path"}
    figures.update(vs_previous(figures))
    path = write_result("engine", figures)
    # The run's own copy, for the next run's ``vs_previous`` (engine.json is overwritten each time).
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    (path.parent / f"engine-{stamp}.json").write_text(path.read_text())


if __name__ == "__main__":
    main()

"""The CUDA paths, checked in one run on a lent GPU -> bench-results/gpu.json (not part of `make bench`).

What the CPU machines cannot check, each section recorded whether it passes or fails (one failure does not
hide the others; the exit status is 1 if any failed):

- ``consistency``: the engine's log-probs against the training forward on CUDA (toy model, every grammar, both
  modes): fp32 (target <= 1e-4, as on CPU); bf16 weights; fp32 weights with the training forward under bf16
  autocast (what ``mixed_precision=bf16`` does in the RL update: the mismatch the importance ratio then sees).
- ``engine_tiny`` / ``engine_4b``: engine tokens/s against transformers' generate and the fork speedups of
  bench_engine.py, on the tiny model (fp32) and on the Qwen3-4B architecture with random weights (bf16).
- ``stages``: ``parathink stage`` on CUDA from a run directory holding base, teacher and filter: sft in bf16,
  sft and grpo_baseline under DeepSpeed ZeRO-2 (one process), rl_easy and grpo_baseline with bf16 mixed
  precision, eval (on the GPU since eval loads onto the process's device).

Usage on the GPU machine (dependencies carried as wheels, see README "GPU checks"):
    python benchmarks/gpu_check.py --run-dir .gpu/run [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engine  # noqa: E402
from _common import write_result  # noqa: E402

from parathink.engine import Engine, SamplingConfig, recompute_logprobs  # noqa: E402
from parathink.engine.toy import prompt_ids, toy_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Qwen3-4B-Base's architecture (its config.json), vocabulary aside: the toy tokenizer's, so that the
# benchmark's grammar tags exist. Random weights: speed does not depend on them.
QWEN3_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                max_position_embeddings=40960, tie_word_embeddings=True)


DEVICE = "cuda"  # --device cpu: a dry run of this script's logic on a machine without a GPU


def environment() -> dict:
    import accelerate
    import transformers

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "accelerate": accelerate.__version__, "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    if DEVICE == "cuda":
        out.update(device=torch.cuda.get_device_name(0), bf16_supported=torch.cuda.is_bf16_supported(),
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    try:
        import deepspeed
        out["deepspeed"] = deepspeed.__version__
    except Exception as e:  # recorded, and the DeepSpeed stage below fails loudly on its own
        out["deepspeed"] = f"not importable: {e}"
    return out


def consistency(samples_per_prompt: int) -> dict:
    """Max |engine log-prob - training log-prob| per precision and mode, over all three grammars."""
    base, tok = toy_model()
    variants = {"fp32": (torch.float32, None), "bf16_weights": (torch.bfloat16, None),
                "fp32_weights_bf16_autocast": (torch.float32, torch.bfloat16)}
    out = {}
    for name, (dtype, autocast) in variants.items():
        model = copy.deepcopy(base).to(device=DEVICE, dtype=dtype)
        for mode in ("causal", "structured"):
            worst, total, tokens, forks = 0.0, 0.0, 0, 0
            for grammar in ("parallel_r1", "npr", "parathinker"):
                engine = Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2)
                samples = engine.generate([prompt_ids(tok, grammar, i) for i in range(16)],
                                          SamplingConfig(max_new_tokens=96, seed=0), num_samples=samples_per_prompt)
                with torch.no_grad(), torch.autocast(DEVICE, dtype=autocast or torch.float32,
                                                     enabled=autocast is not None):
                    logp, _ = recompute_logprobs(model, engine, samples)
                for i, s in enumerate(samples):
                    d = (logp[i, :len(s.logprobs)].float().cpu() - torch.tensor(s.logprobs)).abs()
                    worst, total = max(worst, d.max().item()), total + d.sum().item()
                    tokens, forks = tokens + len(s.logprobs), forks + s.num_blocks
            out[f"{name}_{mode}"] = {"max_abs_diff": worst, "mean_abs_diff": total / max(tokens, 1),
                                     "tokens": tokens, "forks": forks}
    out["fp32_within_1e-4"] = all(out[f"fp32_{m}"]["max_abs_diff"] <= 1e-4 for m in ("causal", "structured"))
    if not out["fp32_within_1e-4"]:
        raise AssertionError(f"fp32 engine/training mismatch above 1e-4: {out}")
    return out


def engine_speed(model, tok, stream_tokens: int, ks: list[int], path_len: int, rounds: int) -> dict:
    """bench_engine's one-stream and fork measurements, the device synchronised before each clock read."""
    sync = torch.cuda.synchronize if DEVICE == "cuda" else None
    out = bench_engine.one_stream(model, tok, stream_tokens, rounds, sync)
    out.update(bench_engine.fork_speedups(model, tok, ks, path_len, rounds, sync))
    for k in [k for k in out if k.endswith("_cpu") or "cpu_time" in k or "per_cpu" in k]:
        out.pop(k)  # process CPU time means nothing for GPU work
    for d in out.get("fork_detail", {}).values():
        for k in [k for k in d if "cpu" in k]:
            d.pop(k)
    return out


def engine_tiny(quick: bool) -> dict:
    model, tok, which = bench_engine.tiny_model()
    model.config.max_position_embeddings = max(model.config.max_position_embeddings, 4096)
    out = {"model": which, "dtype": "float32"}
    out.update(engine_speed(model.to(DEVICE), tok, 256, [2, 4] if quick else [2, 4, 8, 16], 128, 2 if quick else 3))
    return out


def engine_4b(quick: bool) -> dict:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = toy_model(steps=0)
    cfg = Qwen3Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **QWEN3_4B)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(DEVICE):  # initialise on the GPU: 4B parameters on the CPU take minutes
            model = Qwen3ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    out = {"model": "Qwen3-4B architecture, random weights", "dtype": "bfloat16",
           "params": sum(p.numel() for p in model.parameters()),
           "gpu_mem_allocated_gb": torch.cuda.memory_allocated() / 2**30 if DEVICE == "cuda" else None}
    # Short paths and one round: on the H200 the first full-size attempt (128-token paths, two rounds) did not
    # finish in 400 s, since each of the 36 layers pays the per-token launch overhead.
    out.update(engine_speed(model, tok, 64, [2, 4] if quick else [2, 4, 8, 16], 16 if quick else 32, 1))
    del model
    if DEVICE == "cuda":
        out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.empty_cache()
    return out


def _stage(run_dir: Path, name: str, overrides: list[str], env: dict | None = None, timeout: int = 300) -> dict:
    cmd = [sys.executable, "-m", "parathink.cli", "stage", name, f"run_dir={run_dir}", "tracking=none", *overrides]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise RuntimeError(f"`parathink stage {name}` exited {proc.returncode}:\n{tail}")
    manifest = json.loads((run_dir / name / "_manifest.json").read_text())
    return {"wall_s": round(seconds, 1), "overrides": overrides, "metrics": manifest.get("metrics", {})}


def stages(src: Path, quick: bool) -> dict:
    """The stage CLI on CUDA; each run directory starts as a copy of ``src`` (base, teacher, filter)."""
    missing = [s for s in ("base", "teacher", "filter") if not (src / s / "_manifest.json").is_file()]
    if missing:  # said before anything is copied: a bare FileNotFoundError from copytree named no remedy
        raise FileNotFoundError(f"--run-dir {src} lacks the published stages {missing}; prepare it with "
                                "benchmarks/gpu_prepare.sh (after make demo)")
    out: dict = {}
    work = Path("/tmp/parathink-gpu")
    shutil.rmtree(work, ignore_errors=True)
    runs = {k: work / k for k in ("bf16", "deepspeed", "zero3")}
    for d in runs.values():
        shutil.copytree(src, d)
    steps = "3" if quick else "8"
    plan = [
        ("bf16", "sft", ["sft.precision=bf16", "sft.max_minutes=2.0" if not quick else "sft.max_steps=40"], None),
        ("bf16", "rl_easy", ["rl_easy.mixed_precision=bf16", f"rl_easy.steps={steps}", "rl_easy.probe_prompts=16"], None),
        ("bf16", "grpo_baseline", ["grpo_baseline.mixed_precision=bf16", f"grpo_baseline.steps={steps}",
                                   "grpo_baseline.probe_prompts=16"], None),
        ("bf16", "eval", ["eval.sets.easy.n=100", "eval.sets.hard.n=100", "eval.sets.easy.k=4", "eval.sets.hard.k=4",
                          "eval.models=[base,sft,rl_easy,grpo_baseline]"], None),
        # DeepSpeed in one process: the launcher's environment, set by hand.
        ("deepspeed", "sft", ["sft.precision=bf16", "sft.max_steps=20",
                              f"sft.deepspeed={ROOT / 'hydra_conf/deepspeed/zero2.json'}"],
         {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}),
        ("deepspeed", "grpo_baseline", ["grpo_baseline.mixed_precision=bf16", f"grpo_baseline.steps={steps}",
                                        "grpo_baseline.old_logprobs=recompute", "grpo_baseline.probe_prompts=16",
                                        f"grpo_baseline.deepspeed={ROOT / 'hydra_conf/deepspeed/zero2.json'}"],
         {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"}),
        # ZeRO-3: the model built partitioned, the engine's whole copy synced after each step.
        ("zero3", "grpo_baseline", ["grpo_baseline.mixed_precision=bf16", f"grpo_baseline.steps={steps}",
                                    "grpo_baseline.old_logprobs=recompute", "grpo_baseline.probe_prompts=16",
                                    f"grpo_baseline.deepspeed={ROOT / 'hydra_conf/deepspeed/zero3.json'}"],
         {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29513"}),
    ]
    for run, name, overrides, env in plan:
        key = f"{run}/{name}"
        try:
            out[key] = _stage(runs[run], name, overrides, env)
        except Exception as e:
            out[key] = {"error": str(e)[-3000:]}
        print(f"[gpu_check] stage {key}: {'FAILED' if 'error' in out[key] else out[key]['wall_s']}", flush=True)
    results = runs["bf16"] / "eval" / "results.json"
    if results.exists():
        out["eval_results"] = json.loads(results.read_text())
    failed = [k for k, v in out.items() if isinstance(v, dict) and "error" in v]
    if failed:
        raise RuntimeError(f"stages failed: {failed}; " + " | ".join(out[k]["error"][-400:] for k in failed))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=ROOT / ".gpu/run", help="a run dir with base, teacher, filter")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="sections to run (default: all)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: dry-run the script's logic")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    # Slowest and least certain last, so that a call cut at its time limit keeps the rest (gpu_partial.json).
    sections = {"environment": environment, "consistency": lambda: consistency(2 if args.quick else 4),
                "engine_tiny": lambda: engine_tiny(args.quick), "stages": lambda: stages(args.run_dir, args.quick),
                "engine_4b": lambda: engine_4b(args.quick)}
    figures, failed = {}, []
    for name, fn in sections.items():
        if args.only and name not in args.only and name != "environment":
            continue
        t = time.perf_counter()
        try:
            figures[name] = fn()
        except Exception as e:
            failed.append(name)
            figures[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        figures[name]["section_s"] = round(time.perf_counter() - t, 1)
        print(f"[gpu_check] {name}: {'FAILED' if name in failed else 'ok'} in {figures[name]['section_s']} s",
              flush=True)
        if os.environ.get("OUT"):  # what is done survives a run cut short by the device's time limit
            (Path(os.environ["OUT"]) / "gpu_partial.json").write_text(json.dumps(figures, indent=1, default=str))
    figures["failed_sections"] = failed
    path = write_result("gpu" if DEVICE == "cuda" else "gpu_dry_run", figures)
    if os.environ.get("OUT"):
        shutil.copy(path, Path(os.environ["OUT"]) / "gpu.json")
    print(summary(figures))
    return 1 if failed else 0


def summary(f: dict) -> str:
    """The few lines worth reading first (the whole record is in the JSON)."""
    lines = [f"== gpu_check on {f['environment'].get('device', DEVICE)}; failed: {f['failed_sections'] or 'none'}"]
    for k, v in f.get("consistency", {}).items():
        if isinstance(v, dict):
            lines.append(f"consistency {k}: max {v['max_abs_diff']:.2e} mean {v['mean_abs_diff']:.2e} "
                         f"({v['tokens']} tokens, {v['forks']} forks)")
    for name in ("engine_tiny", "engine_4b"):
        e = f.get(name, {})
        if "engine_tok_s" in e:
            lines.append(f"{name}: engine {e['engine_tok_s']:.0f} tok/s, generate {e['hf_generate_tok_s']:.0f} tok/s "
                         f"(x{e['engine_over_hf']:.2f}); fork speedup "
                         + ", ".join(f"K={k}: {v:.2f}" for k, v in e["fork_speedup"].items()))
    for k, v in f.get("stages", {}).items():
        if isinstance(v, dict) and "wall_s" in v:
            m = v["metrics"]
            keep = {x: round(m[x], 4) for x in ("steps", "train_loss", "reward_first", "reward_last", "accuracy_last",
                                                "probe_accuracy_start", "probe_accuracy_end", "seconds") if x in m}
            lines.append(f"stage {k}: {v['wall_s']} s {keep}")
    for model, sets in f.get("stages", {}).get("eval_results", {}).get("stages", {}).items():
        lines.append(f"eval {model}: " + ", ".join(f"{s} {v['accuracy']:.3f} (n={v['n']}, parallel {v['parallel_rate']:.2f})"
                                                 for s, v in sets.items()))
    for name in f["failed_sections"]:
        lines.append(f"FAILED {name}: {f[name]['error'][:600]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA paths, checked and timed in one call on a lent GPU -> gpu.json (not part of `make bench`; docs/gpu.md).

Each section is recorded whether it passes or fails, under a time box, so one failure or slowness does not hide
or starve the others; the exit status is 1 if any failed:

- ``consistency``: the engine's log-probs against the training forward on CUDA (toy model, every grammar, both
  modes; the default decode there: CUDA graphs): fp32 (target <= 1e-4, as on CPU); bf16 weights; fp32 weights
  with the training forward under bf16 autocast (what ``mixed_precision=bf16`` does in the RL update).
- ``engine_tiny``: engine tokens/s against transformers' generate, and the fork speed-ups, on the tiny model.
- ``qwen3_4b``: the real size (``gpu_qwen3_4b``): the graphs checked against eager decoding, then decode
  tokens/s per batch for the engine and ``generate`` against the bandwidth limit, fork speed-ups, structured SFT
  tokens/s and MFU at sequence 4096, one RL step; headline figures under fixed names.
- ``stages``: ``parathink stage`` on CUDA from a run directory holding base, teacher and filter: sft in bf16, sft
  and grpo_baseline under DeepSpeed ZeRO-2/3 (one process), rl_easy and grpo_baseline in bf16, eval.

Usage on the GPU machine (dependencies carried as wheels, docs/gpu.md):
    python benchmarks/gpu_check.py --run-dir .gpu/run --quick       # about 8 minutes: --budget 450
``--device cpu`` runs every section's logic at toy sizes (CI does, tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engine
import gpu_qwen3_4b

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.engine.toy import prompt_ids, toy_model

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "cuda"  # --device cpu: a dry run of this script's logic on a machine without a GPU
DEADLINE = float("inf")  # perf_counter() time by which the whole call must be done (--budget)


class OutOfTime(Exception):
    pass


_limits: list[float] = []  # the deadlines of the boxes currently open, innermost last


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise OutOfTime in the block after ``seconds`` (or the enclosing box's deadline, if sooner)."""
    deadline = min([time.perf_counter() + seconds, DEADLINE, *_limits])

    def arm() -> None:
        if _limits:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, _limits[-1] - time.perf_counter()))
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def stop(signum, frame):
        raise OutOfTime(f"over its time box ({seconds:.0f} s, or the call's --budget)")

    previous = signal.signal(signal.SIGALRM, stop)
    _limits.append(deadline)
    arm()
    try:
        yield
    finally:
        _limits.pop()
        arm()
        signal.signal(signal.SIGALRM, previous)


def _remaining() -> float:
    """Seconds left to the innermost open box (or the call's deadline)."""
    return min([DEADLINE, *_limits]) - time.perf_counter()


def box(part: dict, seconds: float, fn) -> bool:
    """Run ``fn(part)`` under a time box; record in ``part`` its seconds, peak GPU memory and any error (with the
    traceback); True when it finished. Skipped when the call's time is spent."""
    if DEADLINE - time.perf_counter() < 2:
        part["error"] = "skipped: the call's --budget is spent"
        return False
    if DEVICE == "cpu":
        seconds *= 10  # the dry run checks logic, not speed, on CPUs far slower than the GPU host and often shared
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    ok = True
    try:
        with time_limit(seconds):
            fn(part)
    except Exception as e:  # recorded; the next part still runs
        ok = False
        part["error"] = f"{type(e).__name__}: {e}"[:3000]
        part["traceback"] = traceback.format_exc()[-3000:]
    part["section_s"] = round(time.perf_counter() - t, 1)
    if DEVICE == "cuda":
        part["peak_gpu_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    gc.collect()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    _save_partial()
    return ok


# ------------------------------------------------------------------------------------------------------- sections


def environment(part: dict) -> None:
    import accelerate
    import transformers

    part.update(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
                accelerate=accelerate.__version__, tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                python=platform.python_version())
    if DEVICE == "cuda":
        part.update(device=torch.cuda.get_device_name(0), bf16_supported=torch.cuda.is_bf16_supported(),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    try:
        import deepspeed
        part["deepspeed"] = deepspeed.__version__
    except Exception as e:  # recorded, and the DeepSpeed stages below fail loudly on their own
        part["deepspeed"] = f"not importable: {e}"


def consistency(part: dict, prompts: int, samples_per_prompt: int, tokens: int) -> None:
    """Max |engine log-prob - training log-prob| per precision and mode, over all three grammars."""
    base, tok = toy_model()
    variants = {"fp32": (torch.float32, None), "bf16_weights": (torch.bfloat16, None),
                "fp32_weights_bf16_autocast": (torch.float32, torch.bfloat16)}
    for name, (dtype, autocast) in variants.items():
        model = copy.deepcopy(base).to(device=DEVICE, dtype=dtype)
        for mode in ("causal", "structured"):
            worst, total, count, forks = 0.0, 0.0, 0, 0
            for grammar in ("parallel_r1", "npr", "parathinker"):
                engine = Engine(model, tok, grammar, mode, num_paths=3 if grammar == "npr" else 2)
                samples = engine.generate([prompt_ids(tok, grammar, i) for i in range(prompts)],
                                          SamplingConfig(max_new_tokens=tokens, seed=0), num_samples=samples_per_prompt)
                with torch.no_grad(), torch.autocast(DEVICE, dtype=autocast or torch.float32,
                                                     enabled=autocast is not None):
                    logp, _ = recompute_logprobs(model, engine, samples)
                for i, s in enumerate(samples):
                    d = (logp[i, :len(s.logprobs)].float().cpu() - torch.tensor(s.logprobs)).abs()
                    worst, total = max(worst, d.max().item()), total + d.sum().item()
                    count, forks = count + len(s.logprobs), forks + s.num_blocks
            part[f"{name}_{mode}"] = {"max_abs_diff": worst, "mean_abs_diff": total / max(count, 1),
                                      "tokens": count, "forks": forks}
    part["fp32_within_1e-4"] = all(part[f"fp32_{m}"]["max_abs_diff"] <= 1e-4 for m in ("causal", "structured"))
    if not part["fp32_within_1e-4"]:
        raise AssertionError("fp32 engine/training mismatch above 1e-4")


def engine_tiny(part: dict, stream_tokens: int, ks: list[int], path_len: int, rounds: int) -> None:
    """bench_engine's one-stream and fork measurements on the tiny model (fp32), the device synchronised, after
    the CUDA-graph decode is checked against the decode without graphs."""
    model, tok, which = bench_engine.tiny_model()
    model.config.max_position_embeddings = max(model.config.max_position_embeddings, 4096)
    model = model.to(DEVICE)
    sync = torch.cuda.synchronize if DEVICE == "cuda" else None
    part.update(model=which, dtype="float32")
    gpu_qwen3_4b.decode_check(part.setdefault("decode_check", {}), model, tok, 16, 64)
    part.update(gpu_qwen3_4b.wall_times(bench_engine.one_stream(model, tok, stream_tokens, rounds, sync)))
    part.update(gpu_qwen3_4b.wall_times(bench_engine.fork_speedups(model, tok, ks, path_len, rounds, sync)))


def _stage(run_dir: Path, name: str, overrides: list[str], env: dict | None, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "parathink.cli", "stage", name, f"run_dir={run_dir}", "tracking=none", *overrides]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise RuntimeError(f"`parathink stage {name}` exited {proc.returncode}:\n{tail}")
    manifest = json.loads((run_dir / name / "_manifest.json").read_text())
    return {"wall_s": round(seconds, 1), "overrides": overrides, "metrics": manifest.get("metrics", {})}


def _ds(zero: str, port: int) -> tuple[str, dict]:
    """A DeepSpeed JSON override and the launcher's environment for one process, set by hand."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return str(ROOT / f"hydra_conf/deepspeed/{zero}.json"), env


def stages(part: dict, src: Path, quick: bool) -> None:
    """The stage CLI on CUDA; each run directory starts as a copy of ``src`` (base, teacher, filter)."""
    missing = [s for s in ("base", "teacher", "filter") if not (src / s / "_manifest.json").is_file()]
    if missing:  # said before anything is copied: a bare FileNotFoundError from copytree named no remedy
        raise FileNotFoundError(f"--run-dir {src} lacks the published stages {missing}; prepare it with "
                                "benchmarks/gpu_prepare.sh (after make demo)")
    work = Path("/tmp/parathink-gpu")
    shutil.rmtree(work, ignore_errors=True)
    runs = {k: work / k for k in ("bf16", "deepspeed", "zero3")}
    for d in runs.values():
        shutil.copytree(src, d)
    steps = "3" if quick else "8"
    (z2, env2), (z2b, env2b), (z3, env3) = _ds("zero2", 29511), _ds("zero2", 29512), _ds("zero3", 29513)
    rl = [f"grpo_baseline.steps={steps}", "grpo_baseline.probe_prompts=16", "grpo_baseline.mixed_precision=bf16"]
    plan = [
        ("bf16", "sft", ["sft.precision=bf16", "sft.max_minutes=2.0" if not quick else "sft.max_steps=40"], None),
        ("bf16", "rl_easy", ["rl_easy.mixed_precision=bf16", f"rl_easy.steps={steps}", "rl_easy.probe_prompts=16"],
         None),
        ("bf16", "grpo_baseline", rl, None),
        ("bf16", "eval", ["eval.sets.easy.n=100", "eval.sets.hard.n=100", "eval.sets.easy.k=4", "eval.sets.hard.k=4",
                          "eval.models=[base,sft,rl_easy,grpo_baseline]"], None),
        ("deepspeed", "sft", ["sft.precision=bf16", "sft.max_steps=20", f"sft.deepspeed={z2}"], env2),
        ("deepspeed", "grpo_baseline", [*rl, "grpo_baseline.old_logprobs=recompute", f"grpo_baseline.deepspeed={z2b}"],
         env2b),
        # ZeRO-3: the model built partitioned, the engine's whole copy synced after each step.
        ("zero3", "grpo_baseline", [*rl, "grpo_baseline.old_logprobs=recompute", f"grpo_baseline.deepspeed={z3}"],
         env3),
    ]
    for run, name, overrides, env in plan:
        key = f"{run}/{name}"
        # The stage's own timeout ends before the section's box, so that subprocess.run kills the stage it started
        # (an alarm raised while it spawns one would leave the child running).
        seconds = min(300.0, _remaining() - 5)
        try:
            if seconds < 10:
                raise OutOfTime("skipped: the section's time is spent")
            part[key] = _stage(runs[run], name, overrides, env, timeout=seconds)
        except Exception as e:
            part[key] = {"error": f"{type(e).__name__}: {e}"[-3000:]}
        print(f"[gpu_check] stage {key}: {'FAILED' if 'error' in part[key] else part[key]['wall_s']}", flush=True)
    results = runs["bf16"] / "eval" / "results.json"
    if results.exists():
        part["eval_results"] = json.loads(results.read_text())
    failed = [k for k, v in part.items() if isinstance(v, dict) and "error" in v]
    if failed:
        raise RuntimeError(f"stages failed: {failed}")


# ------------------------------------------------------------------------------------------------------- the call

FIGURES: dict = {}
OUT_DIR: Path = ROOT / "bench-results"


def _save_partial() -> None:
    """What is done survives a call cut short by the device's time limit ($OUT/gpu_partial.json)."""
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "gpu_partial.json").write_text(json.dumps(FIGURES, indent=1, default=str))


def sections(args) -> dict:
    """name -> (time box in seconds, fn(part)); the real sizes on a GPU, toy ones on a CPU."""
    dry, quick = DEVICE == "cpu", args.quick
    scale = gpu_qwen3_4b.DRY if dry else gpu_qwen3_4b.QUICK if quick else gpu_qwen3_4b.GPU
    return {
        "environment": (30, environment),
        "consistency": (60, lambda p: consistency(p, 3 if dry else 16, 1 if dry else 2 if quick else 4,
                                                  40 if dry else 96)),
        "engine_tiny": (60, lambda p: engine_tiny(p, 32 if dry else 256, [2] if dry else [2, 4, 8, 16],
                                                  8 if dry else 128, 1 if dry else 2)),
        "qwen3_4b": (400, lambda p: p.update(gpu_qwen3_4b.run(scale, DEVICE, box))),
        "stages": (300, lambda p: stages(p, args.run_dir, quick)),
    }


def main() -> int:
    global DEVICE, DEADLINE, OUT_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=ROOT / ".gpu/run", help="a run dir with base, teacher, filter")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and samples: the whole call in --budget")
    ap.add_argument("--only", nargs="*", default=None, help="sections to run (default: all)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: dry-run the logic at toy sizes")
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole call (default 450 with "
                    "--quick, 540 without, 3600 for the CPU dry run); sections past it are skipped and recorded so")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results", help="folder of the record")
    args = ap.parse_args()
    DEVICE, OUT_DIR = args.device, args.out
    default_budget = 3600 if DEVICE == "cpu" else 450 if args.quick else 540
    DEADLINE = time.perf_counter() + (args.budget or default_budget)
    if DEVICE == "cpu":
        torch.set_num_threads(1)  # the dry run checks logic; one thread does not fight the other jobs on CI's cores
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    failed = []
    for name, (seconds, fn) in sections(args).items():
        if args.only and name not in args.only and name != "environment":
            continue
        part = FIGURES.setdefault(name, {})
        if not box(part, seconds, fn) or _failed_inside(part):
            failed.append(name)
        print(f"[gpu_check] {name}: {'FAILED' if name in failed else 'ok'} in {part['section_s']} s", flush=True)
    FIGURES["failed_sections"] = failed
    path = write_record(FIGURES)
    if os.environ.get("OUT") and Path(os.environ["OUT"]).resolve() != path.parent.resolve():
        shutil.copy(path, Path(os.environ["OUT"]) / "gpu.json")
    print(summary(FIGURES))
    return 1 if failed else 0


def _failed_inside(part: dict) -> bool:
    """A section whose own parts failed (qwen3_4b boxes each of its parts)."""
    return any(isinstance(v, dict) and "error" in v for v in part.values())


def write_record(figures: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / ("gpu.json" if DEVICE == "cuda" else "gpu_dry_run.json")
    record = {"benchmark": "gpu_check", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, **figures}
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path


def summary(f: dict) -> str:
    """The few lines worth reading first (the whole record is in the JSON)."""
    lines = [f"== gpu_check on {f['environment'].get('device', DEVICE)}; failed: {f['failed_sections'] or 'none'}"]
    for k, v in f.get("consistency", {}).items():
        if isinstance(v, dict):
            lines.append(f"consistency {k}: max {v['max_abs_diff']:.2e} mean {v['mean_abs_diff']:.2e} "
                         f"({v['tokens']} tokens, {v['forks']} forks)")
    e = f.get("engine_tiny", {})
    if "engine_tok_s" in e:
        lines.append(f"engine_tiny: engine {e['engine_tok_s']:.0f} tok/s, generate {e['hf_generate_tok_s']:.0f} tok/s "
                     f"(x{e['engine_over_hf']:.2f}); fork speedup "
                     + ", ".join(f"K={k}: {v:.2f}" for k, v in e["fork_speedup"].items()))
    lines += _summary_4b(f.get("qwen3_4b", {}))
    for k, v in f.get("stages", {}).items():
        if isinstance(v, dict) and "wall_s" in v:
            m = v["metrics"]
            keep = {x: round(m[x], 4) for x in ("steps", "train_loss", "reward_first", "reward_last", "accuracy_last",
                                                "probe_accuracy_start", "probe_accuracy_end", "seconds") if x in m}
            lines.append(f"stage {k}: {v['wall_s']} s {keep}")
    for name in f["failed_sections"]:
        part = f[name]
        errors = [part.get("error")] + [f"{k}: {v['error']}" for k, v in part.items()
                                        if isinstance(v, dict) and "error" in v]
        lines.append(f"FAILED {name}: " + " | ".join(e[:400] for e in errors if e))
    return "\n".join(lines)


def _summary_4b(q: dict) -> list[str]:
    lines = []
    c = q.get("ceilings", {})
    if "bandwidth_gb_s" in c:
        lines.append(f"qwen3_4b ceilings: copy {c['bandwidth_gb_s']:.0f} GB/s, "
                     f"bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s")
    d = q.get("decode_check", {})
    if "passed" in d:
        lines.append(f"qwen3_4b decode_check: passed={d['passed']} ({d['forks']} forks; graphs vs eager "
                     f"{d['graphs_vs_eager_same_samples']:.2f} same samples; host syncs per step "
                     f"{d.get('host_syncs_per_step', 'n/a')}, inside the decode step "
                     f"{d.get('decode_step_host_syncs', 'n/a')})")
    for b, row in q.get("decode", {}).items():
        if isinstance(row, dict) and "generate_tok_s" in row:
            frac = row.get("engine_bandwidth_fraction")
            lines.append(f"qwen3_4b decode b={b}: engine {row['engine_tok_s']:.0f} tok/s"
                         + (f" ({frac:.1%} of the bandwidth limit)" if frac is not None else "")
                         + f", generate {row['generate_tok_s']:.0f} (x{row['engine_over_generate']:.2f})")
    fork = q.get("fork", {}).get("fork_speedup")
    if fork:
        lines.append("qwen3_4b fork speedup " + ", ".join(f"K={k}: {v:.2f}" for k, v in fork.items()))
    s = q.get("sft", {})
    if "tokens_per_s" in s:
        mfu = f", MFU {s['mfu']:.1%}" if s.get("mfu") is not None else ""
        lines.append(f"qwen3_4b sft {s['sequence']}: {s['tokens_per_s']:.0f} tok/s{mfu}, attention kernel "
                     f"{s['attention']['kernel']}")
    r = q.get("rl", {})
    if "update_recompute_s" in r:
        lines.append(f"qwen3_4b rl step: rollout {r['rollout_s']:.1f} s ({r['generated_tokens']} tokens), update "
                     f"{r['update_engine_s']:.1f} s, with recompute {r['update_recompute_s']:.1f} s")
    if q.get("headline"):
        lines.append(f"qwen3_4b headline: {json.dumps(q['headline'])}")
    return lines


if __name__ == "__main__":
    sys.exit(main())

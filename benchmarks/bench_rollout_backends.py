"""One RL step with each rollout backend (``<stage>.rollout.backend``): the native engine against vLLM colocated in
its own venv (parathink.vllm_rollout), on the same tiny model, problems, group size and lengths.

Both sides recompute the old log-probs with the training forward (vLLM must; the native engine is run the same way
so that the updates cost the same), so the step differs in the rollout and in vLLM's weight sync after the
optimiser step. Writes ``bench-results/rollout_backends.json``: per backend the step (median over the timed steps,
after one untimed warm-up step), the rollout alone, its tokens/s, the update, and for vLLM the sync time and the
rollout/training log-prob gap; and ``vllm_over_native`` for the step and for the rollout, measured in this one run.
vLLM's start (~20 s here) is outside every timed step. On this CPU the figures say what the colocated path costs on
a tiny model (per-call overhead, the JSON pipe); the GPU comparison on Qwen3-4B waits for a vLLM on the GPU machine
(docs/gpu.md).

Run: .venv/bin/python benchmarks/bench_rollout_backends.py [--steps 4] [--prompts 8] [--group 8] [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from _common import write_result
from bench_rl import ROOT, time_ours, tiny_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4, help="timed steps per backend (after one warm-up step)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("PARATHINK_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        ckpt, origin = tiny_checkpoint(work / "ckpt")
        sides = {backend: time_ours(ckpt, args, work, "recompute", backend) for backend in ("native", "vllm")}
    native, vllm = sides["native"], sides["vllm"]
    figures = {"model": origin, "prompts": args.prompts, "group_size": args.group, "max_new_tokens": args.new_tokens,
               "timed_steps": args.steps, "threads": torch.get_num_threads(),
               "vllm_over_native_step": vllm["s_per_step"] / native["s_per_step"],
               "vllm_over_native_rollout": vllm["rollout_s"] / native["rollout_s"]}
    for name, side in sides.items():
        figures.update({f"{name}_{k}": v for k, v in side.items() if k != "mean_length"})
        figures[f"{name}_mean_length"] = side["mean_length"]
    write_result("rollout_backends", figures)


if __name__ == "__main__":
    main()

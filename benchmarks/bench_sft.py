"""SFT throughput and peak memory: our `sft` (causal collator) vs TRL's SFTTrainer, and our structured collator.

Same tiny model (the shipped base), same traces (scripted teacher, easy + hard), same settings (batch, lr,
steps, response-only loss, fp32), measured in one run; each variant in its own process so that peak RSS is its
own. tokens/s counts non-padding tokens of the examples consumed. Writes bench-results/sft.json.
    .venv/bin/python benchmarks/bench_sft.py [--steps 30] [--batch 16] [--contended-steps 5]

The contended case runs ours and TRL again with a CPU hog on every core this process may use (another job on the
same node, a noisy neighbour): thread pools that spin at their barriers lose the cores they wait for. Ours runs
as the `parathink` command sets it up (parathink.threads: threads from the cgroup quota and affinity, passive
OpenMP waits); TRL with torch's defaults, as its users run it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("ours_causal", "trl_sft", "ours_structured")
CONTENDED = ("ours_causal", "trl_sft")


def traces(n: int) -> list[dict]:
    from parathink.data.synthetic import generate
    from parathink.teacher.scripted import scripted_trace

    recs = generate("easy", "train", n // 2, seed=11) + generate("hard", "train", n - n // 2, seed=11)
    return [{"problem": r["problem"], "response": scripted_trace(r, ["left_to_right", "backwards"], 2)} for r in recs]


def run_variant(name: str, steps: int, batch: int, n: int, out: Path) -> dict:

    from parathink.config import sft as sft_config
    from parathink.data.prompts import build_prompt
    from parathink.formats.layouts import TagIds
    from parathink.modeling import load_model
    from parathink.tracking.tracker import NullTracker
    from parathink.training.sft import CausalCollator, StructuredCollator, encode_traces, train_sft

    model, tok = load_model("builtin:tiny_base")
    data = traces(n)
    cfg = sft_config.SFTConfig(global_batch=batch, micro_batch=batch, max_steps=steps, max_minutes=0,
                               save_steps=10**6, lr=1e-3)
    train_set, _ = encode_traces(data, tok, cfg.max_length, "drop")
    tokens_per_example = sum(len(e["input_ids"]) for e in train_set) / len(train_set)
    model.train()
    if name == "trl_sft":
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        ds = Dataset.from_list([{"prompt": build_prompt(r["problem"], tok), "completion": r["response"] + tok.eos_token}
                                for r in data])
        args = SFTConfig(output_dir=str(out / name), per_device_train_batch_size=batch, max_steps=steps,
                         learning_rate=1e-3, lr_scheduler_type="cosine", warmup_steps=0.1, weight_decay=0.01,
                         adam_beta2=0.95, logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
                         max_length=cfg.max_length, packing=False, completion_only_loss=True,
                         dataset_num_proc=None, use_cpu=True, seed=0, dataset_kwargs={"add_special_tokens": False})
        trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
    else:
        if name == "ours_structured":
            collator = StructuredCollator(tok.pad_token_id, TagIds.from_tokenizer(tok, "parallel_r1"))
        else:
            collator = CausalCollator(tok.pad_token_id)
        metrics, _ = train_sft(model, tok, train_set, collator, cfg, work_dir=out / name, tracker=NullTracker())
        seconds = metrics["seconds"]
    return {"seconds": seconds, "steps": steps, "batch": batch,
            "tokens_per_s": steps * batch * tokens_per_example / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(variant: str, steps: int, a: argparse.Namespace, out: Path) -> dict:
    """One variant in its own process (its own peak RSS, its own thread pools)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    proc = subprocess.run([sys.executable, __file__, "--variant", variant, "--steps", str(steps), "--batch",
                           str(a.batch), "--n", str(a.n), "--out", str(out)], capture_output=True, text=True,
                          env={**env, "CI": "true"})
    if proc.returncode:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.rsplit("RESULT", 1)[1])
    print(variant, result, flush=True)
    return result


@contextlib.contextmanager
def cpu_hogs():
    """One busy process per core this process may use, for as long as the block runs; yields their count."""
    from parathink.threads import usable_cpus

    n = usable_cpus()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--contended-steps", type=int, default=5, help="steps of each contended run")
    ap.add_argument("--variant", choices=VARIANTS)
    ap.add_argument("--out", default=str(ROOT / "bench-results"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.variant:  # child process: one variant, result on stdout
        if a.variant.startswith("ours"):
            from parathink import threads

            threads.configure()  # what `parathink` does at start, before torch is imported
        print("RESULT", json.dumps(run_variant(a.variant, a.steps, a.batch, a.n, out / "sft_scratch")))
        return
    results = {v: child(v, a.steps, a, out) for v in VARIANTS}
    with cpu_hogs() as hogs:
        contended = {v: child(v, a.contended_steps, a, out) for v in CONTENDED}
    ours, trl = results["ours_causal"], results["trl_sft"]
    slowdown = {v: results[v]["tokens_per_s"] / contended[v]["tokens_per_s"] for v in CONTENDED}
    summary = {"variants": results, "speed_ratio_ours_vs_trl": ours["tokens_per_s"] / trl["tokens_per_s"],
               "memory_ratio_ours_vs_trl": ours["peak_rss_mb"] / trl["peak_rss_mb"],
               "structured_vs_causal_speed": results["ours_structured"]["tokens_per_s"] / ours["tokens_per_s"],
               "contended": {"cpu_hogs": hogs, "variants": contended, "slowdown": slowdown,
                             "speed_ratio_ours_vs_trl": contended["ours_causal"]["tokens_per_s"]
                             / contended["trl_sft"]["tokens_per_s"]},
               "target": "ours_causal no slower than trl_sft (speed_ratio >= 1), quiet and contended; "
                         "contended slowdown of ours no worse than TRL's"}
    (out / "sft.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

"""One GRPO step, ours against TRL's GRPOTrainer, on the same tiny model, problems, group size and lengths.

Writes ``bench-results/rl.json`` with ``trl_s_per_step`` and ``parathink_s_per_step`` (median over the timed
steps, after one untimed warm-up step each) and their ratio (target: ours <= 0.7 of TRL's), measured in this one
run so machine noise hits both alike. Ours runs a second time with ``old_logprobs=recompute``
(``recompute_s_per_step``, ``recompute_update_over_engine``): the price of the extra no-grad forward. Both
sides: the same checkpoint, hard synthetic problems, P prompts x G rollouts, temperature 1.0, at most L new
tokens, the accuracy reward, token-level loss, no KL, one update per step, AdamW at the same lr. TRL samples with
transformers' ``generate``; we sample with ``parathink.engine``.

Run: .venv/bin/python benchmarks/bench_rl.py [--steps 4] [--prompts 8] [--group 8] [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def tiny_checkpoint(dest: Path) -> tuple[Path, str]:
    """The shipped tiny base when present, else a freshly built tiny model (same architecture) saved to ``dest``."""
    from parathink.modeling import load_model, save_model

    try:
        model, tok = load_model("builtin:tiny_base")
        origin = "builtin:tiny_base"
    except FileNotFoundError:
        from omegaconf import OmegaConf

        from parathink.data.synthetic import corpus
        from parathink.modeling.factory import build_tiny_model
        from parathink.modeling.tags import add_tag_tokens
        from parathink.modeling.tokenizer import train_tokenizer

        mcfg = OmegaConf.load(ROOT / "hydra_conf/model/tiny.yaml")
        tok = train_tokenizer(corpus(2000, seed=0), vocab_size=int(mcfg.tokenizer.vocab_size))
        model = build_tiny_model(mcfg, tok)
        add_tag_tokens(model, tok)
        origin = "fresh tiny model (no shipped base yet)"
    save_model(model, tok, dest)
    return dest, origin


def problems(n: int, seed: int = 0) -> list[dict]:
    from parathink.data.sources import load_problems

    return load_problems({"source": "synthetic", "level": "hard", "split": "train", "n": n}, seed=seed)


def accuracy_reward(completions, answer, **_) -> list[float]:
    from parathink.grading import grade

    return [1.0 if grade(c, a)[1] else -1.0 for c, a in zip(completions, answer)]


def time_trl(ckpt: Path, args, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from parathink.data.prompts import build_prompt
    from parathink.modeling import load_model

    model, tok = load_model(ckpt)
    tok.padding_side = "left"
    recs = problems(args.prompts * (args.steps + 1))
    data = Dataset.from_list([{"prompt": build_prompt(r["problem"], tok), "answer": str(r["answer"])} for r in recs])
    stamps: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            stamps.append(time.perf_counter())

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    cfg = GRPOConfig(
        output_dir=str(work / "trl"), use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
        max_steps=args.steps + 1, per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=args.lr, beta=0.0, num_iterations=1, loss_type="dapo", scale_rewards="group",
        shuffle_dataset=False, seed=0, disable_tqdm=True, dataloader_num_workers=0, bf16=False,
        # TRL turns activation checkpointing on by default, which also turns the KV cache off during sampling;
        # a user timing TRL on a tiny model would switch it off, so we do, to compare against its best.
        gradient_checkpointing=False, lr_scheduler_type="constant",
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward], args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    t0 = time.perf_counter()
    trainer.train()
    stamps.append(time.perf_counter())
    per_step = [b - a for a, b in zip(stamps, stamps[1:])][1:]  # drop the warm-up step
    return {"s_per_step": statistics.median(per_step), "steps": per_step, "mean_length": lengths[1:],
            "wall_s": time.perf_counter() - t0}


def time_ours(ckpt: Path, args, work: Path, old_logprobs: str = "engine", backend: str = "native") -> dict:
    from omegaconf import OmegaConf

    from parathink.config.rl import RolloutConfig
    from parathink.modeling import load_tokenizer
    from parathink.rundir import timings
    from parathink.stages.context import StageContext
    from parathink.training.rl import RLConfig, setup_problems, train

    tok = load_tokenizer(ckpt)
    spec = {"source": "synthetic", "level": "hard", "split": "train", "n": args.prompts * (args.steps + 1)}
    probe = RLConfig(problems=spec, token_budget=10_000)
    longest = max(len(p.prompt_ids) for p in setup_problems(probe, tok, 0, "bench"))
    cfg = RLConfig(init_from="-", problems=spec, reward="accuracy",
                   mode="causal", steps=args.steps + 1, prompts_per_step=args.prompts, group_size=args.group,
                   token_budget=longest + args.new_tokens, temperature=1.0, top_p=1.0, advantage="group_std",
                   policy_loss="clipped", loss_agg="token_mean", kl_coef=0.0, updates_per_step=1,
                   micro_batch_size=args.prompts * args.group, lr=args.lr, checkpoint_every=10_000,
                   rollout_batch_size=128, eps_high=0.2, old_logprobs=old_logprobs,
                   rollout=RolloutConfig(backend=backend))
    ctx = StageContext.standalone("bench_rl", work / f"ours_{old_logprobs}_{backend}")
    train(cfg, ctx, ckpt, stage="bench", grammar="parallel_r1", model_cfg=OmegaConf.create({"dtype": "float32"}))
    rows = [json.loads(line) for line in (ctx.out_dir / "metrics.jsonl").read_text().splitlines()][1:]
    timed = timings.read(ctx.out_dir)["steps"][1:]  # the steps' times: published beside metrics.jsonl
    per_step = [r["rollout_s"] + r["update_s"] for r in timed]
    out = {"s_per_step": statistics.median(per_step), "steps": per_step,
           "mean_length": [r["response_length"] for r in rows],
           "rollout_s": statistics.median(r["rollout_s"] for r in timed),
           "update_s": statistics.median(r["update_s"] for r in timed),
           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed)}
    if any("weight_sync_s" in r for r in timed):
        out["weight_sync_s"] = statistics.median(r["weight_sync_s"] for r in timed)
    gaps = [r for r in rows if r.get("old_logprob_drift") is not None]
    if gaps:
        out["logprob_gap_mean"] = statistics.median(r["old_logprob_drift"] for r in gaps)
        out["logprob_gap_max"] = max(r["logprob_gap_max"] for r in gaps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4, help="timed steps per side (after one warm-up step)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--only", choices=["trl", "ours"], default=None)
    # One thread by default: a ~1M-parameter model is per-op overhead, and on a shared 2-core machine two
    # threads per process made both sides several times slower and noisier. Both sides get the same setting.
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        ckpt, origin = tiny_checkpoint(work / "ckpt")
        trl = time_trl(ckpt, args, work) if args.only != "ours" else None
        ours = time_ours(ckpt, args, work) if args.only != "trl" else None
        # The price of old_logprobs=recompute (one no-grad training forward per step; what bf16 on a GPU needs).
        recompute = time_ours(ckpt, args, work, "recompute") if args.only != "trl" else None
    result = {"model": origin, "prompts": args.prompts, "group_size": args.group, "max_new_tokens": args.new_tokens,
              "timed_steps": args.steps, "threads": torch.get_num_threads()}
    if trl:
        result.update(trl_s_per_step=trl["s_per_step"], trl_steps=trl["steps"], trl_mean_length=trl["mean_length"])
    if ours:
        result.update(parathink_s_per_step=ours["s_per_step"], parathink_steps=ours["steps"],
                      parathink_mean_length=ours["mean_length"], parathink_rollout_s=ours["rollout_s"],
                      parathink_update_s=ours["update_s"],
                      recompute_s_per_step=recompute["s_per_step"], recompute_update_s=recompute["update_s"],
                      recompute_update_over_engine=recompute["update_s"] / ours["update_s"])
    if trl and ours:
        result["ratio"] = ours["s_per_step"] / trl["s_per_step"]
        result["target_ratio"] = 0.7
    out = ROOT / "bench-results" / "rl.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}, indent=2))


if __name__ == "__main__":
    main()

"""RL ablation (issue 29): a minimal GRPO loop written from the paper's equation against the project's loop.

Both start from the same shipped base, draw the same training problems step by step (hard synthetic, train split),
use the same group size, prompts per step, learning rate, temperature and token budget, and are scored on the same
**validation** problems: hard problems of the train split drawn with their own seed and none of them in the RL
pool of any seed this script trains at; never the test split that ``eval`` reports.

- ``reference``: DeepSeekMath eq. 3 with one update per batch (ratio 1, so clipping never acts), ±1 reward,
  A = (r - mean_group) / (std_group + eps), token-level mean over the step's response tokens, no KL, Adam, no
  gradient clipping, constant lr. Its own sampler (KV cache, T = 1, full distribution) and its own forward; the
  only project pieces are the model, the prompt template, the grader and the step's problem draw.
- ``stage``: ``parathink.training.rl.train`` with the ``grpo_baseline`` stage's composed config (``tiny``), and
  ``key=value`` overrides for one difference at a time.
- ``headroom``: the start model's validation accuracy at T = 0 (greedy), 0.5, 0.7 and 1, printed (not written to
  ``--out``): how much of its T = 1 error is sampling slips that a sharper policy would not make (what RL at T = 1
  can gain without new skill).

Each run writes one JSON line to ``--out`` (default bench-results/rl_ablation.jsonl): the validation accuracy of
the start and of the trained policy per problem (so that any two runs pair over the same problems), the steps, the
seconds, and the mean training reward of the first and last 10 steps.

Run (one line per arm; `base` scores the start model only):
  .venv/bin/python benchmarks/rl_ablation.py base
  .venv/bin/python benchmarks/rl_ablation.py reference --steps 100
  .venv/bin/python benchmarks/rl_ablation.py stage --steps 100 grpo_baseline.grad_clip=0
  .venv/bin/python benchmarks/rl_ablation.py stage --steps 160 --score-every 40 grpo_baseline.lr=1e-5  # a curve
  .venv/bin/python benchmarks/rl_ablation.py headroom   # accuracy against the sampling temperature
  .venv/bin/python benchmarks/rl_ablation.py gradcheck  # one step: the stage's update against the equation
  .venv/bin/python benchmarks/rl_ablation.py table      # paired differences against the base, ± SE
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
VALIDATION_SEED = 424_242  # the validation draw's own seed (the RL pool uses the run's seed)
TRAIN_SEEDS = (0, 1, 2)  # RL pools the validation set is kept out of


# ----------------------------------------------------------------------------------------------------------------
# validation problems and scoring


def validation_problems(n: int) -> list[dict]:
    """``n`` hard train-split problems drawn with their own seed, none of them in the RL pool of TRAIN_SEEDS."""
    from parathink.data import synthetic

    pool = {p["problem"] for s in TRAIN_SEEDS for p in synthetic.generate("hard", "train", 20_000, s)}
    out = []
    for p in synthetic.iter_problems("hard", "train", VALIDATION_SEED):
        if p["problem"] not in pool:
            out.append(p)
        if len(out) == n:
            return out
    raise AssertionError("unreachable: the stream is endless")


@torch.no_grad()
def score(model, tok, problems: list[dict], k: int, seed: int, temperature: float = 1.0) -> list[int]:
    """Right answers out of ``k`` samples per problem (T = 1 unless given, top_p = 1, eval's 320-token budget,
    causal)."""
    from parathink.data.prompts import build_prompt
    from parathink.engine import Engine, SamplingConfig
    from parathink.grading import grade

    engine = Engine(model.eval(), tok, "parallel_r1", "causal", 2)
    prompts = tok([build_prompt(p["problem"], tok) for p in problems], add_special_tokens=False)["input_ids"]
    sampling = SamplingConfig(temperature=temperature, top_p=1.0, max_new_tokens=320, seed=seed, batch_size=512)
    right = [0] * len(problems)
    for s in engine.generate(prompts, sampling, num_samples=k):
        right[s.prompt_index] += int(grade(s.text, problems[s.prompt_index]["answer"])[1])
    return right


# ----------------------------------------------------------------------------------------------------------------
# the reference loop, from the equation


@torch.no_grad()
def sample(model, prompts: list[list[int]], group: int, new_tokens: int, eos: int, pad: int,
           gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``group`` continuations of each prompt at T = 1 over the full distribution, with a KV cache.
    Returns ids [B, P + N] (prompts left-padded), attention mask [B, P + N], response mask [B, N] (the eos
    included, nothing after it) and P."""
    rows = [p for p in prompts for _ in range(group)]
    width = max(len(p) for p in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, p in enumerate(rows):
        ids[i, width - len(p):], att[i, width - len(p):] = torch.tensor(p), 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
    cache, logits, alive = out.past_key_values, out.logits[:, -1], torch.ones(len(rows), dtype=torch.bool)
    new, live = [], []
    for _ in range(new_tokens):
        probs = torch.softmax(logits.float(), -1)
        tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        tok = torch.where(alive, tok, torch.full_like(tok, pad))
        new.append(tok)
        live.append(alive.clone())
        alive = alive & (tok != eos)
        if not alive.any():
            break
        att = torch.cat([att, torch.ones_like(att[:, :1])], -1)  # a finished row's pads are never trained on
        pos = pos[:, -1:] + 1
        out = model(input_ids=tok[:, None], attention_mask=att, position_ids=pos, past_key_values=cache,
                    use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
    resp, mask = torch.stack(new, 1), torch.stack(live, 1).float()
    return torch.cat([ids, resp], 1), torch.cat([att[:, :width], torch.ones_like(resp)], 1), mask, width


def reference(model, tok, problems: list[dict], steps: int, *, prompts_per_step: int, group: int, lr: float,
              token_budget: int, seed: int, log) -> list[dict]:
    """GRPO (DeepSeekMath eq. 3, one update per batch, no KL) in plain torch; returns the step log."""
    from parathink.data.prompts import build_prompt
    from parathink.grading import grade
    from parathink.training.rl_rollouts import problems_for_step

    encoded = tok([build_prompt(p["problem"], tok) for p in problems], add_special_tokens=False)["input_ids"]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        chosen = problems_for_step(len(problems), prompts_per_step, step, seed)
        prompts = [encoded[i] for i in chosen]
        model.eval()
        ids, att, mask, width = sample(model, prompts, group, token_budget - max(map(len, prompts)),
                                       tok.eos_token_id, tok.pad_token_id, gen)
        texts = tok.batch_decode(torch.where(mask.bool(), ids[:, width:], tok.pad_token_id),
                                 skip_special_tokens=True)
        r = torch.tensor([1.0 if grade(t, problems[chosen[i // group]]["answer"])[1] else -1.0
                          for i, t in enumerate(texts)]).view(-1, group)  # [P, G]
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)  # [B]
        model.train()
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, width - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, width:, None]).squeeze(-1)  # [B, N]
        ratio = torch.exp(logp - logp.detach())  # = 1; the gradient of log pi
        loss = -(ratio * adv[:, None] * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rows.append({"step": step, "reward_mean": float(r.mean()), "accuracy": float((r > 0).float().mean()),
                     "seconds": time.perf_counter() - t0, "response_length": float(mask.sum(1).mean())})
        log(rows[-1])
    model.eval()
    return rows


# ----------------------------------------------------------------------------------------------------------------
# the project's loop


def stage(init_dir: Path, steps: int, seed: int, overrides: list[str], work: Path,
          at_step=None, every: int = 0) -> tuple[Path, list[dict]]:
    """``grpo_baseline`` as the tiny experiment composes it (no probe, no wall-clock cap) with ``overrides``.
    With ``every`` > 0, ``at_step(step, policy, rows)`` is called every ``every`` steps before the last (the
    validation curve of one run): at the points where the stage would write a resumable checkpoint, which this
    run does not need. The policy it gets is a copy; the RNG states are put back, so the run goes on exactly as
    an uninterrupted one (the step's problems and draws are functions of the step and seed)."""
    import copy

    from parathink.pipeline.compose import compose
    from parathink.stages.context import StageContext
    from parathink.stages.rl import rl_config
    from parathink.training import rl_checkpoint
    from parathink.training.rl import train

    cfg = compose(["experiment=tiny", f"grpo_baseline.steps={steps}", "grpo_baseline.max_minutes=0",
                   "grpo_baseline.probe_prompts=0",
                   f"grpo_baseline.checkpoint_every={every if every > 0 else steps + 1}", *overrides])
    settings = rl_config(cfg, "grpo_baseline")
    ctx = StageContext.standalone("grpo_baseline", work, seed=seed)
    metrics = ctx.work_dir / "metrics.jsonl"

    def snapshot(accelerator, work_dir, step, extra):  # in place of rl_checkpoint.save
        rng = (torch.get_rng_state(), random.getstate())
        policy = copy.deepcopy(accelerator.unwrap_model(accelerator._models[0])).eval()
        at_step(step, policy, [json.loads(line) for line in Path(metrics).read_text().splitlines()])
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])

    saved = rl_checkpoint.save
    rl_checkpoint.save = snapshot if every > 0 else saved
    try:
        train(settings, ctx, init_dir, stage="grpo_baseline", grammar=str(cfg.format), model_cfg=cfg.get("model"))
    finally:
        rl_checkpoint.save = saved
    rows = [json.loads(line) for line in (ctx.out_dir / "metrics.jsonl").read_text().splitlines()]
    return ctx.out_dir / "model", rows


# ----------------------------------------------------------------------------------------------------------------
# the exact comparison: one step's gradient, the stage's update against the equation, on the same rollouts


def gradcheck(seed: int) -> dict:
    """Sample one step (16 hard problems x 8) with the engine, as the stage does; take the stage's ``update`` with
    SGD at lr 1 and no clipping (the step is then minus its gradient) and compare it with the gradient of the
    reference loss written here: -sum_i A_i sum_t exp(logp - sg(logp)) / (all response tokens), from one plain
    causal forward per rollout. Also the largest gap between the engine's log-probs and that forward's."""
    from accelerate import Accelerator

    from parathink.config.rl import RLConfig
    from parathink.data.prompts import build_prompt
    from parathink.data.sources import load_problems
    from parathink.engine import Engine, SamplingConfig
    from parathink.modeling import load_model
    from parathink.rewards import get_reward
    from parathink.training.rl import update
    from parathink.training.rl_rollouts import assemble
    from parathink.training.rl_rollouts import score as score_rollout

    model, tok = load_model("builtin:tiny_base")
    engine = Engine(model, tok, "parallel_r1", "causal", 3)
    probs = load_problems({"source": "synthetic", "level": "hard", "split": "train", "n": 16}, seed=seed)
    ids = tok([build_prompt(p["problem"], tok) for p in probs], add_special_tokens=False)["input_ids"]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=288 - max(map(len, ids)), seed=seed,
                              batch_size=128)
    samples = engine.generate(ids, sampling, num_samples=8)
    reward = get_reward("accuracy")
    batch = assemble([score_rollout(s.prompt_index, s, s.text, probs[s.prompt_index]["answer"], "parallel_r1",
                                    reward, 1) for s in samples], 8, "group_std", False, False)
    tokens, gap = sum(len(s.response_ids) for s in samples), 0.0
    model.zero_grad()
    for r in batch.rollouts:
        seq = torch.tensor([list(r.sample.prompt_ids) + list(r.sample.response_ids)])
        logits = model(input_ids=seq).logits[0, len(r.sample.prompt_ids) - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r.sample.response_ids)[:, None]).squeeze(-1)
        gap = max(gap, float((logp.detach() - torch.tensor(r.sample.logprobs)).abs().max()))
        (-(r.advantage * torch.exp(logp - logp.detach())).sum() / tokens).backward()
    want = torch.cat([-p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    cfg = RLConfig(init_from="-", mode="causal", lr=1.0, grad_clip=0.0, token_budget=288)
    update(Accelerator(cpu=True), model.train(), None, engine, opt,
           torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0), batch, cfg)
    got = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    return {"cosine": float(torch.nn.functional.cosine_similarity(want, got, 0)),
            "norm_ratio": float(got.norm() / want.norm()), "gradient_norm": float(want.norm()),
            "logprob_gap_max": gap, "rollouts": len(samples),
            "truncated": sum(s.finish_reason == "length" for s in samples)}


# ----------------------------------------------------------------------------------------------------------------
# the table


def paired(a: list[int], b: list[int], k: int) -> tuple[float, float]:
    """Mean of b - a in points and its standard error over problems (each problem's k samples are one unit)."""
    d = [(y - x) * 100.0 / k for x, y in zip(a, b)]
    m = sum(d) / len(d)
    var = sum((x - m) ** 2 for x in d) / (len(d) - 1)
    return m, math.sqrt(var / len(d))


def table(path: Path) -> str:
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bases = {(r["n"], r["k"], r["score_seed"]): r["right"] for r in runs if r["arm"] == "base"}
    lines = ["| arm | overrides | seed | steps | minutes | train reward first -> last 10 | val. acc | vs base |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if r["arm"] == "base":
            continue
        base = bases.get((r["n"], r["k"], r["score_seed"]))
        acc = 100.0 * sum(r["right"]) / (r["n"] * r["k"])
        diff = "-" if base is None else "{:+.1f} ± {:.1f}".format(*paired(base, r["right"], r["k"]))
        lines.append(f"| {r['arm']} | {' '.join(r['overrides']) or '-'} | {r['seed']} | {r['steps']} | "
                     f"{r['seconds'] / 60:.1f} | {r['reward_first']:.3f} -> {r['reward_last']:.3f} | {acc:.1f} | "
                     f"{diff} |")
    for key, right in bases.items():
        lines.append(f"base on validation (n={key[0]} problems x k={key[1]}): "
                     f"{100.0 * sum(right) / (key[0] * key[1]):.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("arm", choices=["base", "reference", "stage", "headroom", "gradcheck", "table"])
    ap.add_argument("overrides", nargs="*", help="stage arm: hydra overrides, e.g. grpo_baseline.grad_clip=0")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="training seed (problem draw, sampling)")
    ap.add_argument("--n", type=int, default=800, help="validation problems")
    ap.add_argument("--k", type=int, default=2, help="samples per validation problem")
    ap.add_argument("--score-seed", type=int, default=11)
    ap.add_argument("--lr", type=float, default=2e-5, help="reference arm")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--score-every", type=int, default=0,
                    help="stage arm: also score the policy every this many steps (one line each: the curve)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "rl_ablation.jsonl")
    args = ap.parse_intermixed_args(argv)  # overrides may follow the options
    if args.arm == "table":
        print(table(args.out))
        return
    if args.arm == "gradcheck":
        print(json.dumps(gradcheck(args.seed)))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    from parathink.data.sources import load_problems
    from parathink.modeling import load_model, save_model

    t0 = time.perf_counter()
    val = validation_problems(args.n)
    log = lambda row: print(json.dumps(row), file=sys.stderr, flush=True)  # noqa: E731

    def mean(key, part):
        return sum(r[key] for r in part) / max(1, len(part))

    def record(rows: list[dict], right: list[int], seconds: float) -> None:
        """One JSON line: the policy after ``len(rows)`` steps, scored on the validation problems."""
        line = {"arm": args.arm, "overrides": args.overrides if args.arm == "stage" else
                ([f"lr={args.lr}"] if args.arm == "reference" else []), "seed": args.seed, "steps": len(rows),
                "seconds": seconds, "n": args.n, "k": args.k, "score_seed": args.score_seed,
                "reward_first": mean("reward_mean", rows[:10]), "reward_last": mean("reward_mean", rows[-10:]),
                # sharpening shows as falling entropy; a length drift as a biased token-level loss
                **{f"{key}_{end}": mean(key, part) for key in ("entropy", "response_length")
                   for end, part in (("first", rows[:10]), ("last", rows[-10:])) if rows and key in rows[0]},
                "grad_norm_max": max((r.get("grad_norm") or 0.0 for r in rows), default=0.0), "right": right}
        args.out.parent.mkdir(exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"{args.arm} {' '.join(line['overrides'])} seed {args.seed}: validation "
              f"{100.0 * sum(right) / (args.n * args.k):.1f} (n={args.n} x k={args.k}), {len(rows)} steps, "
              f"{seconds / 60:.1f} min (the model load and training)", flush=True)

    scoring = [0.0]  # seconds spent scoring the curve's points: not training time

    def at_step(step: int, policy, rows: list[dict]) -> None:
        t = time.perf_counter()
        seconds = t - t0 - scoring[0]
        right = score(policy, tok, val, args.k, args.score_seed)
        scoring[0] += time.perf_counter() - t
        record(rows, right, seconds)

    model, tok = load_model("builtin:tiny_base")
    if args.arm == "headroom":
        for temperature in (0.0, 0.5, 0.7, 1.0):
            k = 1 if temperature == 0 else args.k  # greedy: one sample is all samples
            right = score(model, tok, val, k, args.score_seed, temperature)
            print(json.dumps({"temperature": temperature, "n": args.n, "k": k,
                              "accuracy": 100.0 * sum(right) / (args.n * k),
                              "any_right": 100.0 * sum(r > 0 for r in right) / args.n}), flush=True)
        return

    with tempfile.TemporaryDirectory() as tmp:
        init = Path(tmp) / "base"
        save_model(model, tok, init)
        rows: list[dict] = []
        if args.arm == "reference":
            torch.manual_seed(args.seed)
            train = load_problems({"source": "synthetic", "level": "hard", "split": "train", "n": 20_000},
                                  seed=args.seed)
            rows = reference(model, tok, train, args.steps, prompts_per_step=16, group=8, lr=args.lr,
                             token_budget=288, seed=args.seed, log=log)
        elif args.arm == "stage":
            trained, rows = stage(init, args.steps, args.seed, args.overrides, Path(tmp) / "run", at_step,
                                  args.score_every)
            model, tok = load_model(trained)
        seconds = time.perf_counter() - t0 - scoring[0]
        right = score(model, tok, val, args.k, args.score_seed)
    record(rows, right, seconds)


if __name__ == "__main__":
    main()

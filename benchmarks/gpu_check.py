"""The CUDA paths, checked and timed in one call on a lent GPU -> gpu.json (not part of `make bench`; docs/gpu.md).

The call runs a plan: sections in order, each in a time box, the boxes summing to the call's budget (``BOXES``,
asserted below). The cheapest and most informative sections come first, so a call cut short still answers the
questions that matter most; each section is recorded whether it passes or fails, so one failure or slowness does
not hide the others, and the exit status is 1 if any failed:

- ``environment``: versions, the device and its memory.
- ``qwen3_4b.*`` (``gpu_qwen3_4b``): Qwen3-4B's architecture with random bf16 weights: ``build``; ``ceilings``
  (copy bandwidth, bf16 matmul rate); ``decode_check`` (CUDA graphs against the same decode without them: the same
  tokens); ``decode`` (tokens/s at batch 1/16/64/256 against the bandwidth limit of the weight and KV bytes each
  step reads); ``sft`` (tokens/s and MFU at 4,096 tokens); ``fork`` (K paths as rows against one stream); ``rl``
  (one RL step sized by the memory model for an 80 GB GPU: its peak memory against the estimate).
- ``consistency``: the engine's log-probs against the training forward on CUDA (toy model, every grammar, both
  modes, CUDA graphs on): fp32 (target <= 1e-4, as on CPU); bf16 weights; fp32 weights under bf16 autocast.

The boxes are cooperative deadlines, not signals: a section calls ``deadline.check(...)`` between its units of work
(a batch, a K, a step) and stops there when its box has ended, keeping what it measured. Nothing interrupts a unit,
so no alarm can fire inside a ``torch.cuda.graph`` capture. The schedule is fixed from the start (section i ends by
the sum of boxes 0..i), so a section that finishes early leaves its time to the next ones and the call ends by its
budget; a watchdog thread writes the record and exits if a unit overruns the budget by ``GRACE_S``.

``--plan stages`` runs ``parathink stage`` on CUDA instead (sft bf16, rl_easy and grpo_baseline bf16, eval, sft and
grpo_baseline under ZeRO-2, grpo_baseline under ZeRO-3, and sft -> rl_easy under ZeRO-2 in one ``parathink run``),
from a run directory that ``gpu_prepare.sh`` makes.

``qwen3_4b.probe`` and ``qwen3_4b.paged`` (issue 47): a gate's probe-sized engine call (256 rows) under the KV budget
the memory model gives it, and paged decode at 128 rows x 2,000 tokens under half the KV it would need: each
peak against the memory model's estimate of the call.

Usage on the GPU machine (dependencies carried as wheels, docs/gpu.md "The GPU check"):
    python benchmarks/gpu_check.py --out $OUT        # 420 s of boxes, ends by ~480 s; the call's timeout_s: 510
``--device cpu`` runs every section's code at toy sizes in well under a minute (CI does: tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import accelerate
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_qwen3_4b as q4b

from parathink.engine import Engine, SamplingConfig, recompute_logprobs
from parathink.testing.toy import prompt_ids, toy_model

ROOT = Path(__file__).resolve().parent.parent

# The call on a lent GPU: one device call of at most 10 minutes within 15 minutes of device time, a machine's start
# (1-2 minutes) included, leaves room for one shorter rerun (--only). Seconds per section, in the order they run.
BUDGET_S = 420
BOXES: tuple[tuple[str, float], ...] = (
    ("environment", 5),
    ("qwen3_4b.build", 20),
    ("qwen3_4b.ceilings", 10),
    ("qwen3_4b.decode_check", 30),
    ("qwen3_4b.decode", 70),  # batches 1/16/64/256 and transformers' generate: shortened for the two below
    ("qwen3_4b.sft", 30),
    ("qwen3_4b.fork", 25),
    ("qwen3_4b.probe", 25),  # issue 47: the gates' probe under its KV budget (it ran out of memory unbudgeted)
    ("qwen3_4b.paged", 80),  # issue 47: paged decode at 128 x 2,000 tokens under a tight budget
    ("qwen3_4b.rl", 100),  # frees the 4B model (its step is measured alone): the sections that need it come first
    ("consistency", 25),
)
STAGES_BOXES: tuple[tuple[str, float], ...] = (("environment", 5), ("stages", 415))
PLANS = {"check": BOXES, "stages": STAGES_BOXES}
for _name, _boxes in PLANS.items():
    assert sum(s for _, s in _boxes) == BUDGET_S, f"the {_name} plan's boxes must sum to its budget"
# What a section uses that an earlier one makes (``--only`` adds it).
NEEDS = {"qwen3_4b.decode": ("qwen3_4b.build", "qwen3_4b.ceilings"), "qwen3_4b.decode_check": ("qwen3_4b.build",),
         "qwen3_4b.sft": ("qwen3_4b.build",), "qwen3_4b.fork": ("qwen3_4b.build",),
         "qwen3_4b.probe": ("qwen3_4b.build",), "qwen3_4b.paged": ("qwen3_4b.build",)}
GRACE_S = 30  # past the budget, the watchdog writes the record and ends the call (imports come before the clock)
MIN_START_S = 1.0  # a section with less of its box left is skipped, and recorded so

DEVICE = "cuda"  # --device cpu: a dry run of this script's code at toy sizes on a machine without a GPU
FIGURES: dict = {}
OUT_DIR: Path = ROOT / "bench-results"
CURRENT = ["(starting)"]  # the section running now, for the watchdog's record


class OutOfTime(Exception):
    pass


# The schedule's clock: a test replaces it with one it advances itself, so that the schedule is checked without
# timing anything.
clock = time.perf_counter


@dataclass(frozen=True)
class Deadline:
    """The end of a section's box (``clock()`` seconds); ``check`` between units of work."""

    at: float
    box_s: float

    def left(self) -> float:
        return self.at - clock()

    def check(self, before: str) -> None:
        if clock() >= self.at:
            raise OutOfTime(f"its {self.box_s:.0f} s box ended before {before}")


def schedule(boxes, budget: float | None = None) -> list[tuple[str, float]]:
    """The boxes, scaled to ``budget`` when given, so that they always sum to the call's budget."""
    total = sum(s for _, s in boxes)
    factor = 1.0 if budget is None else budget / total
    return [(name, s * factor) for name, s in boxes]


def run_plan(plan: list[tuple[str, float]], fns: dict, figures: dict, start: float | None = None) -> list[str]:
    """Run each section by its fixed deadline (``start`` + its box + every box before it); the failed ones."""
    start = clock() if start is None else start
    end, failed = start, []
    for name, seconds in plan:
        end += seconds
        part = part_of(figures, name)
        if not box(part, Deadline(end, seconds), fns[name], start) or failed_inside(part):
            failed.append(name)
        print(f"[gpu_check] {name}: {'FAILED' if name in failed else 'ok'} in {part['section_s']} s "
              f"(box {seconds:.0f} s)", flush=True)
    return failed


def part_of(figures: dict, name: str) -> dict:
    """The record's dict for a section: ``qwen3_4b.decode`` is ``figures["qwen3_4b"]["decode"]``."""
    for key in name.split("."):
        figures = figures.setdefault(key, {})
    return figures


def box(part: dict, deadline: Deadline, fn, start: float) -> bool:
    """Run ``fn(part, deadline)``; record in ``part`` its box, its seconds, peak GPU memory and any error (with the
    traceback); True when it finished. Skipped when its box has ended already (earlier sections ran over)."""
    part.update(box_s=round(deadline.box_s, 1), deadline_s=round(deadline.at - start, 1))
    if deadline.left() < MIN_START_S:
        part.update(error="skipped: its box ended before it could start (earlier sections ran over)", section_s=0.0)
        return False
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = clock()
    ok = True
    try:
        fn(part, deadline)
    except Exception as e:  # recorded; the next section still runs
        ok = False
        part["error"] = f"{type(e).__name__}: {e}"[:3000]
        part["traceback"] = traceback.format_exc()[-3000:]
    part["section_s"] = round(clock() - t, 1)
    if deadline.left() < 0:  # a unit ran past the box's end: the next sections have that much less
        part["over_box_s"] = round(-deadline.left(), 1)
    if DEVICE == "cuda":
        part["peak_gpu_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    gc.collect()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    _save_partial()
    return ok


def failed_inside(part: dict) -> bool:
    """A section whose own parts failed (stages records each stage's error)."""
    return any(isinstance(v, dict) and "error" in v for v in part.values())


def start_watchdog(at: float) -> threading.Thread:
    """At ``at`` (perf_counter seconds) write the record with what is done and end the process: a unit of work that
    overruns the budget must not take the call past the device's limit with nothing written."""
    def watch() -> None:
        time.sleep(max(0.0, at - time.perf_counter()))
        FIGURES["watchdog"] = f"cut at {GRACE_S} s past the budget, inside {CURRENT[0]}"
        FIGURES.setdefault("failed_sections", []).append(CURRENT[0])
        for _ in range(3):  # the main thread may be writing into the record
            try:
                write_record(copy.deepcopy(FIGURES))
                break
            except RuntimeError:
                time.sleep(0.1)
        print(f"[gpu_check] watchdog: {FIGURES['watchdog']}", flush=True)
        os._exit(3)

    thread = threading.Thread(target=watch, daemon=True, name="gpu_check watchdog")
    thread.start()
    return thread


# ------------------------------------------------------------------------------------------------------- sections


def environment(part: dict, deadline: Deadline) -> None:
    part.update(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
                accelerate=accelerate.__version__, tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                python=platform.python_version(), cpus=os.cpu_count())
    try:  # the version only: importing DeepSpeed costs seconds, and only the stages plan uses it
        part["deepspeed"] = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        part["deepspeed"] = None
    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        part.update(device=torch.cuda.get_device_name(0), bf16_supported=torch.cuda.is_bf16_supported(),
                    capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory / 2**30, 2),
                    multiprocessors=props.multi_processor_count)


def consistency(part: dict, deadline: Deadline, prompts: int, samples_per_prompt: int, tokens: int) -> None:
    """Max |engine log-prob - training log-prob| per precision and mode, over all three grammars."""
    base, tok = toy_model()
    variants = {"fp32": (torch.float32, None), "bf16_weights": (torch.bfloat16, None),
                "fp32_weights_bf16_autocast": (torch.float32, torch.bfloat16)}
    for name, (dtype, autocast) in variants.items():
        model = copy.deepcopy(base).to(device=DEVICE, dtype=dtype)
        for mode in ("causal", "structured"):
            deadline.check(f"{name} {mode}")
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


def _chain(run_dir: Path, names: list[str], overrides: list[str], env: dict | None, timeout: float) -> dict:
    """``parathink run stages=[...]``: the stages one after another in one process, as a user's run chains them
    (issue 47: a second DeepSpeed stage in the same process failed with 'You cannot pass in a deepspeed_plugin
    when creating a second Accelerator')."""
    cmd = [sys.executable, "-m", "parathink.cli", "run", f"stages=[{','.join(names)}]", f"run_dir={run_dir}",
           "tracking=none", *overrides]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise RuntimeError(f"`parathink run stages=[{','.join(names)}]` exited {proc.returncode}:\n{tail}")
    return {"wall_s": round(seconds, 1), "overrides": overrides,
            "device_memory": {n: json.loads((run_dir / n / "_timings.json").read_text()).get("device_memory")
                              for n in names}}


def _ds(zero: str, port: int) -> tuple[str, dict]:
    """A DeepSpeed JSON override and the launcher's environment for one process, set by hand."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return str(ROOT / f"hydra_conf/deepspeed/{zero}.json"), env


def stages(part: dict, deadline: Deadline, src: Path) -> None:
    """The stage CLI on CUDA; each run directory starts as a copy of ``src`` (base, teacher, filter)."""
    missing = [s for s in ("base", "teacher", "filter") if not (src / s / "_manifest.json").is_file()]
    if missing:  # said before anything is copied: a bare FileNotFoundError from copytree named no remedy
        raise FileNotFoundError(f"--run-dir {src} lacks the published stages {missing}; prepare it with "
                                "benchmarks/gpu_prepare.sh (after make demo)")
    work = Path("/tmp/parathink-gpu")
    shutil.rmtree(work, ignore_errors=True)
    runs = {k: work / k for k in ("bf16", "deepspeed", "zero3", "chain")}
    for d in runs.values():
        shutil.copytree(src, d)
    (z2, env2), (z2b, env2b), (z3, env3) = _ds("zero2", 29511), _ds("zero2", 29512), _ds("zero3", 29513)
    zc, envc = _ds("zero2", 29514)
    rl = ["grpo_baseline.steps=3", "grpo_baseline.probe_prompts=16", "grpo_baseline.mixed_precision=bf16"]
    plan = [
        ("bf16", "sft", ["sft.precision=bf16", "sft.max_steps=40"], None),
        ("bf16", "rl_easy", ["rl_easy.mixed_precision=bf16", "rl_easy.steps=3", "rl_easy.probe_prompts=16"], None),
        ("bf16", "grpo_baseline", rl, None),
        ("bf16", "eval", ["eval.sets.easy.n=100", "eval.sets.hard.n=100", "eval.sets.easy.k=4", "eval.sets.hard.k=4",
                          "eval.models=[base,sft,rl_easy,grpo_baseline]"], None),
        ("deepspeed", "sft", ["sft.precision=bf16", "sft.max_steps=20", f"sft.deepspeed={z2}"], env2),
        ("deepspeed", "grpo_baseline", [*rl, "grpo_baseline.old_logprobs=recompute", f"grpo_baseline.deepspeed={z2b}"],
         env2b),
        # ZeRO-3: the model built partitioned, the engine's whole copy synced after each step.
        ("zero3", "grpo_baseline", [*rl, "grpo_baseline.old_logprobs=recompute", f"grpo_baseline.deepspeed={z3}"],
         env3),
        # sft -> rl_easy under ZeRO-2 in one process (issue 47), each stage's peak against its plan estimate
        ("chain", ["sft", "rl_easy"], ["sft.precision=bf16", "sft.max_steps=5", f"sft.deepspeed={zc}",
                                       "sft.gate.enabled=false", "rl_easy.mixed_precision=bf16", "rl_easy.steps=2",
                                       "rl_easy.probe_prompts=16", "rl_easy.gate.enabled=false",
                                       f"rl_easy.deepspeed={zc}"], envc),
    ]
    for run, name, overrides, env in plan:
        key = f"{run}/{name if isinstance(name, str) else '+'.join(name)}"
        # The stage's own timeout ends with the box: subprocess.run kills the stage it started.
        seconds = min(300.0, deadline.left())
        try:
            if seconds < 10:
                raise OutOfTime("skipped: the section's box is spent")
            if isinstance(name, list):
                part[key] = _chain(runs[run], name, overrides, env, timeout=seconds)
            else:
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


def sections(args, bench: q4b.Bench) -> dict:
    """name -> fn(part, deadline): the real sizes on a GPU, toy ones on a CPU."""
    dry = DEVICE == "cpu"
    fns = {"environment": environment,
           "consistency": lambda p, d: consistency(p, d, 3 if dry else 16, 1 if dry else 2, 40 if dry else 96),
           "stages": lambda p, d: stages(p, d, args.run_dir)}
    for name in ("build", "ceilings", "decode_check", "decode", "sft", "fork", "rl", "probe", "paged"):
        fns[f"qwen3_4b.{name}"] = _with_bench(getattr(q4b, name), bench)
    return {name: _tracked(name, fn) for name, fn in fns.items()}


def _with_bench(fn, bench: q4b.Bench):
    return lambda part, deadline: fn(part, deadline, bench)


def _tracked(name: str, fn):
    def run(part: dict, deadline: Deadline) -> None:
        CURRENT[0] = name
        fn(part, deadline)
    return run


# ------------------------------------------------------------------------------------------------------- the call


def _save_partial() -> None:
    """What is done survives a call cut short by the device's time limit ($OUT/gpu_partial.json)."""
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "gpu_partial.json").write_text(json.dumps(FIGURES, indent=1, default=str))


def select(plan_name: str, only: list[str] | None) -> list[tuple[str, float]]:
    """The plan's boxes, or those of the sections ``only`` names (short names: ``decode`` is ``qwen3_4b.decode``)
    and what they need: environment always, the 4B model's build before a section that uses it, the ceilings
    before decode (its bandwidth limit)."""
    boxes = PLANS[plan_name]
    if not only:
        return list(boxes)
    wanted = {"environment"} | {n for n, _ in boxes for o in only if o in (n, n.split(".")[-1])}
    for name, needs in NEEDS.items():
        if name in wanted:
            wanted |= set(needs)
    unknown = [o for o in only if not any(o in (n, n.split(".")[-1]) for n, _ in boxes)]
    if unknown:
        raise SystemExit(f"gpu_check: --only {unknown}: not sections of the {plan_name} plan "
                         f"({', '.join(n for n, _ in boxes)})")
    return [(n, s) for n, s in boxes if n in wanted]


def main() -> int:
    global DEVICE, OUT_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="check", choices=sorted(PLANS), help="check: the 4B sections and consistency; "
                    "stages: the stage CLI on CUDA (needs --run-dir and DeepSpeed)")
    ap.add_argument("--run-dir", type=Path, default=ROOT / ".gpu/run", help="stages: a run dir with base, teacher, "
                    "filter (benchmarks/gpu_prepare.sh)")
    ap.add_argument("--only", nargs="*", default=None, help="sections to run (default: the whole plan), each in its "
                    "own box: a rerun of what a call did not finish")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: dry-run the code at toy sizes")
    ap.add_argument("--budget", type=float, default=None, help=f"seconds for the whole call (default: the sum of "
                    f"the chosen boxes, {BUDGET_S} for a whole plan); every box is scaled to it")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results", help="folder of the record")
    args = ap.parse_args()
    DEVICE, OUT_DIR = args.device, args.out
    if DEVICE == "cpu":
        torch.set_num_threads(1)  # the dry run checks code; one thread does not fight the other jobs on CI's cores
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    plan = schedule(select(args.plan, args.only), args.budget)
    budget = sum(s for _, s in plan)
    start = time.perf_counter()
    FIGURES["plan"] = {"name": args.plan, "budget_s": round(budget, 3), "boxes_s": {n: round(s, 3) for n, s in plan},
                       "boxes_sum_s": round(sum(s for _, s in plan), 3), "grace_s": GRACE_S}
    start_watchdog(start + budget + GRACE_S)
    bench = q4b.Bench(q4b.DRY if DEVICE == "cpu" else q4b.GPU, DEVICE, record=FIGURES.setdefault("qwen3_4b", {}))
    failed = run_plan(plan, sections(args, bench), FIGURES, start)
    if any(n.startswith("qwen3_4b.") for n, _ in plan):
        FIGURES["qwen3_4b"]["headline"] = q4b.headline(FIGURES["qwen3_4b"], bench.scale)
    else:
        FIGURES.pop("qwen3_4b")
    FIGURES["failed_sections"] = failed
    FIGURES["wall_s"] = round(time.perf_counter() - start, 1)
    path = write_record(FIGURES)
    if os.environ.get("OUT") and Path(os.environ["OUT"]).resolve() != path.parent.resolve():
        shutil.copy(path, Path(os.environ["OUT"]) / "gpu.json")
    print(summary(FIGURES))
    return 1 if failed else 0


def write_record(figures: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / ("gpu.json" if DEVICE == "cuda" else "gpu_dry_run.json")
    record = {"benchmark": "gpu_check", "device_kind": DEVICE,
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path


def summary(f: dict) -> str:
    """The few lines worth reading first (the whole record is in the JSON)."""
    p = f["plan"]
    lines = [f"== gpu_check on {f['environment'].get('device', DEVICE)}: plan {p['name']}, {f['wall_s']} s of a "
             f"{p['budget_s']:.0f} s budget; failed: {f['failed_sections'] or 'none'}"]
    lines += _summary_4b(f.get("qwen3_4b", {}))
    for k, v in f.get("consistency", {}).items():
        if isinstance(v, dict):
            lines.append(f"consistency {k}: max {v['max_abs_diff']:.2e} mean {v['mean_abs_diff']:.2e} "
                         f"({v['tokens']} tokens, {v['forks']} forks)")
    for k, v in f.get("stages", {}).items():
        if isinstance(v, dict) and "wall_s" in v:
            m = v["metrics"]
            keep = {x: round(m[x], 4) for x in ("steps", "train_loss", "reward_first", "reward_last", "accuracy_last",
                                                "probe_accuracy_start", "probe_accuracy_end", "seconds") if x in m}
            lines.append(f"stage {k}: {v['wall_s']} s {keep}")
    for name in f["failed_sections"]:
        part = part_of(copy.deepcopy(f), name)
        errors = [part.get("error")] + [f"{k}: {v['error']}" for k, v in part.items()
                                        if isinstance(v, dict) and "error" in v]
        lines.append(f"FAILED {name}: " + " | ".join(e[:400] for e in errors if e))
    return "\n".join(lines)


def _summary_4b(q: dict) -> list[str]:
    lines = []
    c = q.get("ceilings", {})
    if "matmul_tflops" in c:
        lines.append(f"qwen3_4b ceilings: copy {c['bandwidth_gb_s']:.0f} GB/s, bf16 matmul {c['matmul_tflops']:.0f} "
                     "TFLOP/s")
    d = q.get("decode_check", {})
    if "passed" in d:
        lines.append(f"qwen3_4b decode_check: passed={d['passed']} ({d['forks']} forks; graphs vs eager "
                     f"{d['graphs_vs_eager_same_samples']:.2f} same samples; host syncs per step "
                     f"{d.get('host_syncs_per_step', 'n/a')}, inside the decode step "
                     f"{d.get('decode_step_host_syncs', 'n/a')})")
    for b, row in q.get("decode", {}).items():
        if isinstance(row, dict) and "engine_tok_s" in row:
            frac = row.get("engine_bandwidth_fraction")
            kv = row.get("engine_limit", {}).get("kv_share_of_bytes")
            lines.append(f"qwen3_4b decode b={b}: engine {row['engine_tok_s']:.0f} tok/s"
                         + (f" ({frac:.1%} of the limit; KV {kv:.0%} of its bytes)" if frac is not None else "")
                         + (f", generate {row['generate_tok_s']:.0f} (x{row['engine_over_generate']:.2f})"
                            if "generate_tok_s" in row else "")
                         + (f", no graphs {row['no_graphs_tok_s']:.0f} (same tokens: {row['no_graphs_same_tokens']})"
                            if "no_graphs_tok_s" in row else "")
                         + (f", paged {row['paged_tok_s']:.0f}" if "paged_tok_s" in row else ""))
    s = q.get("sft", {})
    if "tokens_per_s" in s:
        mfu = f", MFU {s['mfu']:.1%}" if s.get("mfu") is not None else ""
        lines.append(f"qwen3_4b sft {s['sequence']}: {s['tokens_per_s']:.0f} tok/s{mfu}, attention kernel "
                     f"{s['attention']['kernel']}, checkpointing {s['gradient_checkpointing']}, peak "
                     f"{s['memory']['measured_peak_gib']:.2f} GiB vs estimate {s['memory']['estimate_gib']:.2f}")
    fork = q.get("fork", {}).get("fork_speedup")
    if fork:
        lines.append("qwen3_4b fork speedup " + ", ".join(f"K={k}: {v:.2f}" for k, v in fork.items()))
    r = q.get("rl", {})
    if "update_recompute_s" in r:
        m = r["memory"]
        lines.append(f"qwen3_4b rl step ({r['layers']} layers, {r['params'] / 1e9:.2f}B): rollout {r['rollout_s']:.1f} "
                     f"s ({r['generated_tokens']} tokens), update {r['update_engine_s']:.1f} s, with recompute "
                     f"{r['update_recompute_s']:.1f} s; peak {m['measured_peak_gib']:.2f} GiB vs estimate "
                     f"{m['estimate_gib']:.2f} (x{m['measured_over_estimate']:.2f})")
    if q.get("headline"):
        lines.append(f"qwen3_4b headline: {json.dumps(q['headline'])}")
    return lines


if __name__ == "__main__":
    sys.exit(main())

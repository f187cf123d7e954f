"""vLLM's side of ``bench_peer.py``: its offline ``LLM`` in vLLM's own venv, timed from inside that venv.

Run by bench_peer.py as ``.venv-vllm/bin/python peer_vllm_driver.py SETTINGS_JSON``; it imports nothing of parathink
(that venv pins an older transformers), only vllm, psutil and the standard library. It prints one JSON line when
the engine is up (``{"ready": true, "start_s": ...}``), then answers each request line on stdin
(``{"prompts": [[ids]], "n": N, "max_tokens": T}``) with one line: wall and CPU seconds of the ``generate`` call
(CPU: this process and every child, i.e. vLLM's engine-core and worker processes), the tokens each output got, how
many of them carry a log-prob, and the peak RSS of this process and of its children (each reset before the call,
summed: shared pages count once per process, so it is an upper bound). Everything vLLM prints goes to stderr.
EOF on stdin ends it.
"""

import json
import os
import sys
import time

import psutil


def family() -> list[psutil.Process]:
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    """User + system seconds of each process, by pid (a process started during a call counts from zero)."""
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def reset_peaks(procs: list[psutil.Process]) -> None:
    """Writing 5 to clear_refs resets a process's VmHWM (peak RSS) to its current RSS (Linux >= 4.0)."""
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass


def peak_rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            pass
    return total


def main() -> int:
    settings = json.loads(sys.argv[1])
    replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; stdout itself becomes stderr for vLLM's prints
    os.dup2(2, 1)
    t = time.perf_counter()
    import vllm

    llm = vllm.LLM(**settings["engine_kwargs"])
    replies.write(json.dumps({"ready": True, "start_s": time.perf_counter() - t, "vllm": vllm.__version__}) + "\n")
    replies.flush()
    for line in sys.stdin:
        req = json.loads(line)
        # logprobs=0: the sampled token's log-prob only (what RL needs); ignore_eos: every output runs max_tokens.
        params = vllm.SamplingParams(n=req["n"], temperature=1.0, max_tokens=req["max_tokens"],
                                     ignore_eos=True, logprobs=0)
        prompts = [{"prompt_token_ids": ids} for ids in req["prompts"]]
        # A round must not find the previous round's prompts cached: only the sharing within one call counts.
        llm.reset_prefix_cache()
        procs = family()
        reset_peaks(procs)
        cpu, t = cpu_seconds(procs), time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t
        procs = family()
        spent = sum(c - cpu.get(pid, 0.0) for pid, c in cpu_seconds(procs).items())
        reply = {"wall_s": wall, "cpu_s": spent, "peak_rss_bytes": peak_rss(procs),
                 "processes": len(procs),
                 "tokens": [len(c.token_ids) for o in outputs for c in o.outputs],
                 "logprobs": [len(c.logprobs or []) for o in outputs for c in o.outputs]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

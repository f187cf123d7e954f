"""Scoring speed: parse + metrics of 2 KB traces on one core (issue 2; target >= 20,000 traces/s).

This is the grading-free part of every RL reward call. ``json_loads_per_s`` on the same lines is measured in
the same run as a floor of per-record cost for reference.

Adversarial responses (issue 21): responses built to defeat the extractor (``\\boxed{`` repeated, braces that never
close, a ``Final Answer:`` line of spaces): the time to grade 64 KB of each, and its growth exponent between
512 KB and 4 MB, log(t_4M / t_512K) / log(8): 1 for a linear extractor, 2 for a quadratic one (the old extractor
took 16 s on 64 KB of ``\\boxed{``). Both sizes are past the CPU caches, whose edge alone bends a smaller pair.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, write_result

from parathink.grading import grade
from parathink.scoring import score_record

TARGET_CHARS = 2048
N = 20_000
ADVERSARIAL_CHARS = 64_000
ADVERSARIAL = {  # name -> a response of about n characters
    "boxed_open_repeated": lambda n: "\\boxed{" * (n // 7),
    "closed_then_unclosed": lambda n: "\\boxed{}" * (n // 16) + "{" * (n // 2),
    "final_answer_spaces": lambda n: "Final Answer:" + " " * n + "x",
    "closing_then_boxed": lambda n: "}" * (n // 2) + "\\boxed{" * (n // 14),
}
ADVERSARIAL_MAX_EXPONENT = 1.5  # halfway to quadratic: room for a shared machine's noise


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
    grade_s, growth = {}, {}
    for name, build in ADVERSARIAL.items():
        at_64k, small, large = build(ADVERSARIAL_CHARS), build(ADVERSARIAL_CHARS * 8), build(ADVERSARIAL_CHARS * 64)
        grade_s[name] = best_of(lambda: grade(at_64k, "18"))
        t_small, t_large = best_of(lambda: grade(small, "18")), best_of(lambda: grade(large, "18"), repeats=3)
        growth[name] = round(math.log(t_large / t_small) / math.log(8), 2)
    write_result("score", {
        "adversarial_64kb_grade_s": {k: round(v, 5) for k, v in grade_s.items()},
        "adversarial_growth_exponent": growth,
        "adversarial_max_exponent": ADVERSARIAL_MAX_EXPONENT,
        "adversarial_meets_target": max(growth.values()) <= ADVERSARIAL_MAX_EXPONENT,
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

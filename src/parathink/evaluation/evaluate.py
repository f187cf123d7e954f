"""Evaluate one model on one problem set: sample k responses per problem, grade, score the format.

The sampler is any ``BoundSampler``: ``(prompts, num_samples) -> list[list[str]]`` (prompt-major), which
is a text generator (``Engine.generate_texts``) with its sampling settings bound (``evaluation.generators.bind``).
Keeping it a plain callable lets tests score hand-written responses through exactly the same code as the eval
stage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from parathink.data.prompts import build_prompt
from parathink.evaluation.metrics import best_at_k, maj_at_k, majority, mean_at_k, mean_pass_at_k
from parathink.evaluation.results import SetRow
from parathink.formats import parse
from parathink.formats.metrics import paths_histogram, relative_position, summarize
from parathink.grading import grade

BoundSampler = Callable[[Sequence[str], int], list[list[str]]]


def path_verdicts(trace, gold: str) -> list[tuple[str | None, bool]]:
    """(answer, correct) of each path of a parallel trace's last block, from the path's own ``\\boxed{}``; empty
    for a trace that is not parallel. The last block is the one whose summary leads to the final answer."""
    if not trace.parallel:
        return []
    verdicts = []
    for path in trace.blocks[-1].paths:
        extracted, correct = grade(path.text, gold)
        verdicts.append((extracted, bool(correct)))
    return verdicts


def score_sample(response: str, gold: str, grammar: str, tokenizer: Any = None) -> dict:
    """Every verdict about one response that a metric or a reward reads."""
    trace = parse(response, grammar)
    extracted, correct = grade(response, gold)
    length = len(tokenizer.encode(response, add_special_tokens=False)) if tokenizer is not None else len(response)
    paths = path_verdicts(trace, gold)
    return {"response": response, "extracted": extracted, "correct": bool(correct), "valid": trace.valid,
            "parallel": trace.parallel, "errors": list(trace.errors), "blocks": len(trace.blocks),
            "relative_position": relative_position(trace, tokenizer), "length": length,
            "path_answers": [a for a, _ in paths], "path_correct": [c for _, c in paths]}


def path_metrics(samples: Sequence[dict]) -> dict[str, float | None]:
    """Where a parallel model wins or loses its answers, over the samples with a parallel trace (None without any).

    ``path_accuracy``: share of the last block's paths whose own answer is right (what one path alone scores);
    ``path_vote_accuracy``: share whose paths' plurality answer (first seen wins a tie) is right;
    ``any_path_accuracy``: share with at least one right path, the ceiling of a summary that picks perfectly.
    Next to ``accuracy_parallel`` (the final answer) they say whether the paths or the summary lose the points.
    """
    par = [s for s in samples if s["parallel"] and s.get("path_correct")]
    if not par:
        return {"path_accuracy": None, "path_vote_accuracy": None, "any_path_accuracy": None}
    paths = [c for s in par for c in s["path_correct"]]
    voted = [majority(s["path_answers"]) for s in par]
    right = [v is not None and s["path_correct"][s["path_answers"].index(v)] for s, v in zip(par, voted)]
    return {"path_accuracy": sum(paths) / len(paths), "path_vote_accuracy": sum(right) / len(par),
            "any_path_accuracy": sum(any(s["path_correct"]) for s in par) / len(par)}


def score_problem(record: dict, responses: Sequence[str], grammar: str, tokenizer: Any = None) -> dict:
    samples = [score_sample(r, record["answer"], grammar, tokenizer) for r in responses]
    c = sum(s["correct"] for s in samples)
    return {"id": record["id"], "problem": record["problem"], "answer": record["answer"],
            "level": record.get("level"), "n": len(samples), "correct": c,
            "accuracy": c / len(samples) if samples else 0.0, "samples": samples}


def summarize_set(problems: Sequence[dict], k: int, grammar: str) -> SetRow:
    """The set's row of results.json from its per-problem records."""
    correct = [[s["correct"] for s in p["samples"]] for p in problems]
    answers = [[s["extracted"] for s in p["samples"]] for p in problems]
    samples = [s for p in problems for s in p["samples"]]
    k = min([k] + [len(row) for row in correct]) if correct else k
    # Reparse is cheap next to generation; it keeps the behaviour metrics in formats.metrics alone.
    traces = [parse(s["response"], grammar) for s in samples]
    fmt = summarize(traces)
    positions = [s["relative_position"] for s in samples if s["relative_position"] is not None]
    par = [s for s in samples if s["parallel"]]
    return {
        "n": len(samples), "n_problems": len(problems), "k": k,
        "accuracy": mean_at_k(correct), "pass_at_k": mean_pass_at_k(correct, k), "pass_at_1": mean_at_k(correct),
        "best_at_k": best_at_k(correct, k), "maj_at_k": maj_at_k(answers, correct, k),
        "parallel_rate": fmt.parallel_rate, "valid_rate": fmt.valid_rate,
        # token-based when a tokenizer scored the samples (score_sample), else characters
        "relative_position": sum(positions) / len(positions) if positions else None,
        "blocks_per_trace": fmt.blocks_per_trace, "paths_per_block": fmt.paths_per_block,
        "paths_hist": {str(n): share for n, share in paths_histogram(traces).items()},  # NPR: plans per block
        "response_length": sum(s["length"] for s in samples) / len(samples) if samples else 0.0,
        "accuracy_parallel": sum(s["correct"] for s in par) / len(par) if par else None,
        **path_metrics(samples),
    }


def evaluate_set(records: Sequence[dict], generate: BoundSampler, k: int, *, grammar: str = "parallel_r1",
                 tokenizer: Any = None, batch_problems: int = 64, progress=None) -> tuple[list[dict], dict]:
    """(per-problem records, summary row) for ``records`` with ``k`` samples each; the row's ``seconds_per_sample``
    is the wall time spent generating over the samples drawn (scoring excluded)."""
    problems: list[dict] = []
    seconds = 0.0
    for i in range(0, len(records), batch_problems):
        chunk = records[i:i + batch_problems]
        prompts = [build_prompt(r["problem"], tokenizer) for r in chunk]
        t0 = time.perf_counter()
        outputs = generate(prompts, k)
        seconds += time.perf_counter() - t0
        if len(outputs) != len(chunk) or any(len(o) != k for o in outputs):
            raise RuntimeError(f"generator returned {[len(o) for o in outputs]} samples for {len(chunk)} prompts x {k}")
        problems += [score_problem(r, out, grammar, tokenizer) for r, out in zip(chunk, outputs)]
        if progress is not None:
            progress.update(len(chunk) * k)
    summary = summarize_set(problems, k, grammar)
    summary["seconds_per_sample"] = seconds / max(1, len(records) * k)
    return problems, summary

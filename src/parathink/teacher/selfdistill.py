"""The ``self`` teacher: NPR's teacher-free route to parallel traces (NPR, Sec. 3 "NPR-Beta").

The model samples its own sequential solutions; some of them become the paths of one block and the summary
compares their results and states the majority vote. The trace is kept (by the ``filter`` stage, which checks
the final answer) when the vote is right. Nothing in a path demands a skill the model lacks, which is why
docs/calibration.md finds that self-distilled paths, with the structured layout, keep the tiny model's accuracy.

Three choices shape the trace, each a config key of ``teacher.self``:

- ``grammar``: the block is written in parallel_r1, npr or parathinker (``traces.parallel_block``);
- ``fork``: ``start`` opens the block at the very start of the response; ``agreed`` writes the lines every
  sample shares once, sequentially, and opens the block where the samples differ (``traces.fork_at_agreement``);
- ``path_count``: how many of the ``num_paths`` samples become paths. ``all``; ``decided``, the fewest (from
  ``min_paths``) whose vote is decided (the top answer has two votes or more and no tie), so a problem the model
  finds hard gets more paths (NPR: the model chooses its number of plans, 1-5); ``random``, uniform from
  ``min_paths`` to ``num_paths`` (ParaThinker trains on 2 to 4 paths).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from parathink.data.prompts import build_prompt
from parathink.engine.texts import TextGenerator
from parathink.grading import extract_answer
from parathink.teacher.traces import SUMMARIES, cut_after_boxed, fork_at_agreement, voted_trace

if TYPE_CHECKING:
    from parathink.engine.sampling import SamplingConfig

FORKS = ("start", "agreed")
PATH_COUNTS = ("all", "decided", "random")


def decided_count(answers: list[str | None], min_paths: int) -> int:
    """The fewest leading answers (at least ``min_paths``) whose vote is decided: the most common answer has two
    votes or more and no other ties it. All of them when no prefix is decided (the summary then has no vote)."""
    for k in range(min_paths, len(answers) + 1):
        counts = sorted(Counter(a for a in answers[:k] if a is not None).values(), reverse=True) + [0, 0]
        if counts[0] >= 2 and counts[0] > counts[1]:
            return k
    return len(answers)


def choose_paths(samples: list[str], rule: str, min_paths: int, rng: random.Random) -> list[str]:
    """The samples that become paths, in their sampled order (``path_count``, see the module docstring)."""
    if rule == "all":
        return samples
    if rule == "random":
        return samples[:rng.randint(min_paths, len(samples))]
    return samples[:decided_count([extract_answer(s) for s in samples], min_paths)]


def self_trace(samples: list[str], summary: str = "vote", grammar: str = "parallel_r1",
               fork: str = "start") -> tuple[str, list[str | None], str | None]:
    """(response, path answers, vote) of one problem's sampled solutions, each cut after its ``\\boxed{}``."""
    paths = [cut_after_boxed(s) for s in samples]
    prefix = ""
    if fork == "agreed":
        prefix, paths = fork_at_agreement(paths)
    return voted_trace(paths, prefix, summary=summary, grammar=grammar)


class SelfTeacher:
    """Backend ``self``: ``num_paths`` samples of the model per problem, wrapped as one parallel block."""

    name = "self"

    def __init__(self, generator: TextGenerator, tokenizer, sampling: SamplingConfig, num_paths: int = 3,
                 chunk: int = 256, summary: str = "vote", grammar: str = "parallel_r1", fork: str = "start",
                 path_count: str = "all", min_paths: int = 2):
        if num_paths < 2:
            raise ValueError(f"teacher.self.num_paths must be >= 2 (a block needs two paths), got {num_paths}")
        if summary not in SUMMARIES:
            raise ValueError(f"teacher.self.summary must be one of {', '.join(SUMMARIES)}, got {summary!r}")
        if fork not in FORKS or path_count not in PATH_COUNTS:
            raise ValueError(f"teacher.self: fork must be one of {FORKS} and path_count one of {PATH_COUNTS}, "
                             f"got {fork!r}, {path_count!r}")
        if not 1 <= min_paths <= num_paths:
            raise ValueError(f"teacher.self.min_paths must be in 1..num_paths={num_paths}, got {min_paths}")
        self.generator, self.tokenizer, self.sampling = generator, tokenizer, sampling
        self.num_paths, self.chunk, self.summary = num_paths, chunk, summary
        self.grammar, self.fork, self.path_count, self.min_paths = grammar, fork, path_count, min_paths

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        # Work in chunks so the store receives records as they finish (a kill loses at most one chunk).
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            prompts = [build_prompt(p["problem"], self.tokenizer) for p in part]
            sampling = self.sampling
            if sampling.seed is not None:  # distinct, reproducible draws per chunk
                sampling = dataclasses.replace(sampling, seed=sampling.seed + c)
            samples = self.generator.generate_texts(prompts, sampling, num_samples=self.num_paths)
            for p, ss in zip(part, samples):
                rng = random.Random(f"{sampling.seed}|{p['id']}")  # the same problem gets the same path count
                paths = choose_paths([cut_after_boxed(s) for s in ss], self.path_count, self.min_paths, rng)
                response, answers, vote = self_trace(paths, self.summary, self.grammar, self.fork)
                yield {**p, "response": response, "path_answers": answers, "vote": vote}

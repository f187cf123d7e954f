"""The ``self`` teacher: NPR's teacher-free route to parallel traces (NPR, Sec. 3 "NPR-Beta").

The model samples its own sequential solutions; K of them become the paths of one block and the summary
compares their results and states the majority vote. The trace is kept (by the ``filter`` stage, which checks
the final answer) when the vote is right. Nothing in a path demands a skill the model lacks, which is why
CALIBRATION.md finds that self-distilled paths, with the structured layout, keep the tiny model's accuracy.
"""

from __future__ import annotations

from typing import Iterator

from parathink.data.prompts import build_prompt
from parathink.teacher.generators import Sampling, TextGenerator
from parathink.teacher.traces import SUMMARIES, cut_after_boxed, voted_trace


def self_trace(samples: list[str], summary: str = "vote") -> tuple[str, list[str | None], str | None]:
    """(response, path answers, vote) of one problem's sampled solutions, each cut after its ``\\boxed{}``."""
    return voted_trace([cut_after_boxed(s) for s in samples], summary=summary)


class SelfTeacher:
    """Backend ``self``: ``num_paths`` samples of the model per problem, wrapped as one parallel block."""

    name = "self"

    def __init__(self, generator: TextGenerator, tokenizer, sampling: Sampling, num_paths: int = 3,
                 chunk: int = 256, summary: str = "vote"):
        if num_paths < 2:
            raise ValueError(f"teacher.self.num_paths must be >= 2 (a block needs two paths), got {num_paths}")
        if summary not in SUMMARIES:
            raise ValueError(f"teacher.self.summary must be one of {', '.join(SUMMARIES)}, got {summary!r}")
        self.generator, self.tokenizer, self.sampling = generator, tokenizer, sampling
        self.num_paths, self.chunk, self.summary = num_paths, chunk, summary

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        # Work in chunks so the store receives records as they finish (a kill loses at most one chunk).
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            prompts = [build_prompt(p["problem"], self.tokenizer) for p in part]
            sampling = self.sampling
            if sampling.seed is not None:  # distinct, reproducible draws per chunk
                sampling = Sampling(**{**sampling.__dict__, "seed": sampling.seed + c})
            samples = self.generator.generate_texts(prompts, sampling, num_samples=self.num_paths)
            for p, ss in zip(part, samples):
                response, answers, vote = self_trace(ss, self.summary)
                yield {**p, "response": response, "path_answers": answers, "vote": vote}

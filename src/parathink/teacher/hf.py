"""The ``hf`` teacher: a transformers model asked zero-shot for the parallel format (Parallel-R1, Sec. 3.1).

The teacher prompt (``data/prompts/teacher_<grammar>.txt``) goes through the model's chat template when it has
one (``build_prompt``); one response per problem.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from parathink.data.prompts import build_prompt, teacher_prompt
from parathink.engine.texts import TextGenerator

if TYPE_CHECKING:
    from parathink.engine.sampling import SamplingConfig


class HFTeacher:
    name = "hf"

    def __init__(self, generator: TextGenerator, tokenizer, sampling: SamplingConfig, grammar: str = "parallel_r1",
                 chunk: int = 64):
        self.generator, self.tokenizer, self.sampling = generator, tokenizer, sampling
        self.grammar, self.chunk = grammar, chunk

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            prompts = [build_prompt(teacher_prompt(p["problem"], self.grammar), self.tokenizer) for p in part]
            sampling = self.sampling
            if sampling.seed is not None:
                sampling = dataclasses.replace(sampling, seed=sampling.seed + c)
            for p, (text,) in zip(part, self.generator.generate_texts(prompts, sampling, num_samples=1)):
                yield {**p, "response": text}

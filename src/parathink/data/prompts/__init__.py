"""Prompt templates: the training prompt every stage builds, and the zero-shot teacher prompts.

``build_prompt`` is the one place a problem becomes model input: SFT, RL, eval and the ``self`` teacher all
call it, so a model is always asked the way it was trained. The teacher prompt (Parallel-R1 Sec. 3.1: a
zero-shot instruction that asks a strong model for the parallel format) lives in ``teacher_<grammar>.txt``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

# The plain template for tokenizers without a chat template (the tiny model). The response starts on the
# line after "Solution:", so every worked solution and every trace begins at a line start.
PLAIN_TEMPLATE = "Problem: {problem}\nSolution:\n"


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def build_prompt(problem: str, tokenizer: Any = None) -> str:
    """The model input for ``problem``: the tokenizer's chat template when it has one, else ``PLAIN_TEMPLATE``."""
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"build_prompt: problem must be a non-empty string, got {problem!r:.80}")
    if tokenizer is not None and has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": problem}], tokenize=False,
                                             add_generation_prompt=True)
    return PLAIN_TEMPLATE.format(problem=problem)


@cache
def load_template(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (e.g. ``teacher_parallel_r1``)."""
    path = resources.files(__name__).joinpath(f"{name}.txt")
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {name!r} not found in parathink/data/prompts/")
    return path.read_text(encoding="utf-8")


def teacher_prompt(problem: str, grammar: str = "parallel_r1") -> str:
    """The zero-shot instruction asking a teacher model for ``grammar``'s format, with the problem filled in."""
    # str.replace, not str.format: the template contains literal braces (\\boxed{ANSWER}).
    return load_template(f"teacher_{grammar}").replace("{problem}", problem)

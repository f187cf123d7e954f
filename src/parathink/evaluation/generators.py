"""Samplers for evaluation: ``parathink.engine`` (causal or structured), bound into a ``BoundSampler``.

The engine decides how a block is decoded: ``structured`` forks the paths under the layout the Unseen
models were trained with, ``causal`` writes them one after another (Seen). ``bind`` turns any text generator
(``parathink.engine.texts.TextGenerator``, the interface the teachers sample through too) and its settings into
the ``(prompts, num_samples)`` callable ``evaluate_set`` takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parathink.evaluation.evaluate import BoundSampler

if TYPE_CHECKING:
    from parathink.engine.sampling import SamplingConfig
    from parathink.engine.texts import TextGenerator


def bind(generator: TextGenerator, sampling: SamplingConfig) -> BoundSampler:
    """``generator`` with ``sampling`` fixed; call ``c`` samples with seed ``sampling.seed * 100_003 + c``."""
    calls = [0]

    def generate(prompts: Sequence[str], num_samples: int) -> list[list[str]]:
        calls[0] += 1  # a fresh, reproducible seed per call: chunks must not repeat each other's samples
        per_call = dataclasses.replace(sampling, seed=sampling.seed * 100_003 + calls[0])
        return generator.generate_texts(list(prompts), per_call, num_samples=num_samples)

    return generate


def engine_generator(model: Any, tokenizer: Any, *, grammar: str, mode: str, num_paths: int,
                     sampling: SamplingConfig, kv_cache_bytes: int | None = None) -> tuple[BoundSampler, str]:
    """(sampler, name of the backend used): an ``Engine`` bound to ``sampling``."""
    from parathink.engine import Engine

    engine = Engine(model, tokenizer, grammar=grammar, mode=mode, num_paths=num_paths, kv_cache_bytes=kv_cache_bytes)
    return bind(engine, sampling), f"engine:{mode}"

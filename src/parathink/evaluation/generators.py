"""Samplers for evaluation: ``parathink.engine`` (causal or structured), bound into a ``TextGenerator``.

The engine decides how a block is decoded: ``structured`` forks the paths under the layout the Unseen
models were trained with, ``causal`` writes them one after another (Seen). When the engine package is not
importable (early in development), causal sampling falls back to transformers' ``generate`` and says so;
structured sampling has no fallback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from parathink.evaluation.evaluate import TextGenerator


def engine_generator(model: Any, tokenizer: Any, *, grammar: str, mode: str, num_paths: int,
                     temperature: float, top_p: float, max_new_tokens: int, batch_size: int,
                     seed: int, kv_cache_bytes: int | None = None) -> tuple[TextGenerator, str]:
    """(generator, name of the backend used)."""
    try:
        from parathink.engine import Engine, SamplingConfig
    except ImportError:
        if mode != "causal":
            raise RuntimeError("eval: mode=structured needs parathink.engine, which is not importable") from None
        print("[parathink] eval: parathink.engine not available; sampling with transformers generate",
              file=sys.stderr)
        return _hf_generator(model, tokenizer, temperature, top_p, max_new_tokens, batch_size, seed), "hf_generate"

    engine = Engine(model, tokenizer, grammar=grammar, mode=mode, num_paths=num_paths, kv_cache_bytes=kv_cache_bytes)
    calls = [0]

    def generate(prompts: Sequence[str], num_samples: int) -> list[list[str]]:
        calls[0] += 1  # a fresh, reproducible seed per call: chunks must not repeat each other's samples
        sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                  batch_size=batch_size, seed=seed * 100_003 + calls[0])
        return engine.generate_texts(list(prompts), sampling, num_samples=num_samples)

    return generate, f"engine:{mode}"


def _hf_generator(model, tokenizer, temperature, top_p, max_new_tokens, batch_size, seed) -> TextGenerator:
    from parathink.training.sampling import generate_responses

    calls = [0]

    def generate(prompts: Sequence[str], num_samples: int) -> list[list[str]]:
        calls[0] += 1
        flat = [p for p in prompts for _ in range(num_samples)]
        out = generate_responses(model, tokenizer, flat, temperature=temperature, max_new_tokens=max_new_tokens,
                                 batch_size=batch_size, seed=seed * 100_003 + calls[0])
        return [out[i * num_samples:(i + 1) * num_samples] for i in range(len(prompts))]

    return generate

"""Samplers for evaluation: ``parathink.engine`` (causal or structured) or vLLM (causal; ``eval.rollout.backend``),
bound into a ``BoundSampler``.

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


def vllm_generator(model_dir, tokenizer, *, grammar: str, num_paths: int, sampling: SamplingConfig, dtype: str,
                   kv_cache_bytes: int | None, seed: int = 0) -> tuple[BoundSampler, str, Any]:
    """(sampler, name of the backend, the engine to ``close()``): vLLM colocated in its own venv
    (``parathink.vllm_rollout``), sampling ``model_dir`` causally under the native engine's budget rule. Its KV cache
    is ``kv_cache_bytes`` (the memory model's, on a GPU) or, on a CPU, every row of a call at the model's
    length."""
    import json
    from pathlib import Path

    import torch

    from parathink.engine.grammar import eos_ids, stream_rule
    from parathink.engine.kv_budget import model_kv_bytes_per_token
    from parathink.vllm_rollout import VLLMRollout
    from parathink.vllm_venv import vllm_python

    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    generation = Path(model_dir) / "generation_config.json"
    gen_eos = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id") if generation.exists() else None
    tags, g = stream_rule(tokenizer, grammar, num_paths)
    max_len = int(config.get("max_position_embeddings") or 4096)
    rows = max(1, sampling.batch_size)
    if kv_cache_bytes is None:
        # on a CPU: every row of a call with its response and a prompt of up to 256 tokens, at least one longest row
        kv_cache_bytes = max(rows * (sampling.max_new_tokens + 256), max_len) * model_kv_bytes_per_token(config, dtype)
    rollout = VLLMRollout(model_dir, tokenizer, tags=tags, g=g, eos=eos_ids(tokenizer, gen_eos),
                          python=vllm_python("eval.rollout.backend=vllm"), seed=seed, dtype=str(dtype),
                          max_model_len=max_len, kv_cache_bytes=kv_cache_bytes, max_rows=rows,
                          cpu=not torch.cuda.is_available())
    return bind(rollout, sampling), "vllm:causal", rollout

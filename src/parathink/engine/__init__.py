"""Rollout generation with a KV cache: causal and forked (structured) modes.

Contract (RL, evaluation and the ``self`` teacher call these)::

    from parathink.engine import Engine, SamplingConfig, Sample, recompute_logprobs
    engine = Engine(model, tokenizer, grammar="parallel_r1", mode="causal" | "structured", num_paths=2,
                    decode="auto" | "eager" | "static", cuda_graphs=True)   # auto: CUDA graphs on a GPU
    samples = engine.generate(prompt_ids, SamplingConfig(temperature=1.0, max_new_tokens=256), num_samples=8)
    # -> list[Sample], prompt-major. Sample: prompt_ids, response_ids, logprobs (raw log-softmax at T=1 of each
    #    response token: what the training forward recomputes), loss_mask (0 = forced by the engine),
    #    finish_reason ("stop" | "length"), text, prompt_index, num_blocks.
    engine.layout(sample)                                    # Layout of prompt + response, as training builds it
    engine.generate_texts(["Problem: ..."], sampling, 4)     # list[list[str]]
    logp, entropy = recompute_logprobs(model, engine, samples, with_entropy=True)   # [B, T] each, with grad
    engine.release()                                         # drop the CUDA graphs kept for the next call
    Engine(..., kv_cache_bytes=20 * 2**30)                   # hold at most this much KV (paged; docs/gpu.md)
    engine.stats                                             # the last call: preemptions, peak_kv_bytes, ...
    kv_bytes_per_token(36, 8, 128, "bfloat16")               # 147,456: torch-free (``kv_budget``), for plan

See ``core`` for how forks, merges and the token budget work; ``runner`` for the two forwards; ``cache`` for the
preallocated KV cache, ``paged`` and ``scheduler`` for the budgeted one; ``decode`` for the eager and the static
(CUDA-graph) decode step.

The package imports torch only when one of the torch names is first used, so that ``kv_budget`` (and
``from parathink.engine import kv_bytes_per_token``) stays light for the memory model that ``plan`` runs.
"""

from parathink.engine.kv_budget import kv_bytes_per_token, min_kv_cache_bytes, model_kv_bytes_per_token

__all__ = ["Engine", "Sample", "SamplingConfig", "kv_bytes_per_token", "min_kv_cache_bytes",
           "model_kv_bytes_per_token", "recompute_logprobs"]

_LAZY = {"Engine": "core", "Sample": "core", "SamplingConfig": "sampling", "recompute_logprobs": "recompute"}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"parathink.engine.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'parathink.engine' has no attribute {name!r}")

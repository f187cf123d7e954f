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

See ``core`` for how forks, merges and the budget work; ``runner`` for the two forwards; ``cache`` for the
preallocated KV cache; ``decode`` for the eager and the static (CUDA-graph) decode step.
"""

from parathink.engine.core import Engine, Sample
from parathink.engine.recompute import recompute_logprobs
from parathink.engine.sampling import SamplingConfig

__all__ = ["Engine", "Sample", "SamplingConfig", "recompute_logprobs"]

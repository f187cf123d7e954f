"""Activation (gradient) checkpointing for a training stage's model.

A decoder layer's activations are what a long sequence costs: Qwen3-4B's layer keeps about 186 KiB per token for its
backward in bf16 (``placement.memory_model.layer_activation_bytes``), 6.5 MiB over its 36 layers: 32 GiB for one
5,000-token rollout. Checkpointing keeps each layer's input only (hidden x 2 bytes: 180 KiB a token over all layers)
and one layer recomputed at a time, about a third more compute for a seventeenth of the memory. The gradients are
the same (the recomputed forward is the same computation; a test checks it).

Non-reentrant checkpointing (``use_reentrant=False``): it supports keyword inputs (the 4-D structured mask, position
ids) and parameters that need no gradient, and is what PyTorch recommends.
"""

from __future__ import annotations


def enable_checkpointing(model) -> None:
    """Checkpoint every decoder layer of a Hugging Face model (a wrapper's ``.module`` too); the KV cache of the
    forward is turned off, which checkpointing cannot keep."""
    inner = getattr(model, "module", model)
    if not getattr(inner, "supports_gradient_checkpointing", False):
        raise ValueError(f"gradient_checkpointing: {type(inner).__name__} does not support it")
    inner.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    inner.config.use_cache = False

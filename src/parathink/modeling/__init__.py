"""Tokenizer, model factory, tag tokens and structured attention.

Stable entry points (the engine and RL build on them):
``load_model(path_or_uri, *, device="cpu", dtype=None) -> (model, tokenizer)``,
``parathink.modeling.tags`` (``add_tag_tokens``, ``tag_ids``),
``parathink.modeling.attention.to_4d_mask(mask_bool, dtype)`` and ``structured_inputs(layout)``.
"""

from parathink.modeling.attention import check_structured_attention, structured_inputs, to_4d_mask
from parathink.modeling.factory import build_tiny_model, load_model, load_tokenizer, resolve_source, save_model
from parathink.modeling.paths import install_path_vectors
from parathink.modeling.tags import add_tag_tokens, tag_ids

__all__ = ["add_tag_tokens", "build_tiny_model", "check_structured_attention", "install_path_vectors",
           "load_model", "load_tokenizer", "resolve_source", "save_model", "structured_inputs", "tag_ids",
           "to_4d_mask"]

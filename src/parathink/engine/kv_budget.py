"""KV-cache arithmetic from a model's shape: pure, torch-free (the memory model of ``plan`` imports it).

A decoder keeps, for every token of every row it decodes, one key and one value vector per layer and KV head:
``layers x kv_heads x head_dim x 2 x dtype bytes`` per token (Qwen3-4B in bf16: 36 x 8 x 128 x 2 x 2 = 147,456).
The engine's budgeted cache (``Engine(kv_cache_bytes=...)``, docs/gpu.md "KV cache budget") holds that many bytes
per token in blocks of BLOCK_TOKENS tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Tokens per block of the budgeted (paged) cache. Small blocks waste little at the end of each row (half a block on
# average); large ones make the per-step block table and the gather cheaper. vLLM's default is 16 too.
BLOCK_TOKENS = 16

# Padded prompt tokens one prefill call takes at most (the engine prefills a larger admission in groups): its
# activations, mask and logits then stay a bounded workspace (memory_model.prefill_workspace) beside the KV cache.
PREFILL_TOKENS = 8192

_DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
                "half": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1}


def dtype_bytes(dtype: str | int) -> int:
    """Bytes of one element: ``"bfloat16"``, ``"torch.float32"``, ``"fp16"`` ... or an int (bytes) as it is."""
    if isinstance(dtype, int):
        if dtype < 1:
            raise ValueError(f"dtype bytes must be >= 1, got {dtype}")
        return dtype
    name = str(dtype).removeprefix("torch.").lower()
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r} (one of {', '.join(sorted(_DTYPE_BYTES))}, or bytes as an int)")
    return _DTYPE_BYTES[name]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str | int) -> int:
    """KV bytes one token of one row holds: layers x kv_heads x head_dim x 2 (K and V) x dtype bytes."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if int(value) < 1:
            raise ValueError(f"kv_bytes_per_token: {name} must be >= 1, got {value}")
    return int(layers) * int(kv_heads) * int(head_dim) * 2 * dtype_bytes(dtype)


def model_kv_shape(config: Mapping[str, Any] | Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a transformers-style config (an object or a dict): ``num_hidden_layers``,
    ``num_key_value_heads`` (default: ``num_attention_heads``), ``head_dim`` (default: hidden / heads)."""
    def get(key: str, default: Any = None) -> Any:
        value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
        return default if value is None else value

    heads = int(get("num_attention_heads"))
    head_dim = int(get("head_dim") or int(get("hidden_size")) // heads)
    return int(get("num_hidden_layers")), int(get("num_key_value_heads", heads)), head_dim


def model_kv_bytes_per_token(config: Mapping[str, Any] | Any, dtype: str | int) -> int:
    """``kv_bytes_per_token`` of a transformers-style config."""
    return kv_bytes_per_token(*model_kv_shape(config), dtype)


def blocks_for(tokens: int) -> int:
    """Blocks that hold ``tokens`` entries of one row."""
    return -(-tokens // BLOCK_TOKENS)


def rows_per_sequence(num_paths: int, structured: bool) -> int:
    """The most rows one sequence holds at once: its paths while forked, plus the merged row or a recompute."""
    return num_paths + 1 if structured else 1


def min_kv_cache_bytes(max_len: int, bytes_per_token: int, num_paths: int = 1, structured: bool = False) -> int:
    """The smallest budget the engine takes: one sequence alone always fits (``rows_per_sequence`` rows of
    ``max_len`` = the longest prompt + max_new_tokens + 1 tokens, a spare block each when forked) plus the sink
    block."""
    return (min_kv_blocks(max_len, num_paths, structured) + 1) * BLOCK_TOKENS * bytes_per_token


def min_kv_blocks(max_len: int, num_paths: int = 1, structured: bool = False) -> int:
    return rows_per_sequence(num_paths, structured) * (blocks_for(max_len) + (1 if structured else 0))


def worst_case_kv_bytes(rows: int, max_len: int, bytes_per_token: int) -> int:
    """What the unbudgeted engine allocates up front: every row at the longest length it can reach."""
    return rows * max_len * bytes_per_token

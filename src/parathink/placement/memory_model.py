"""How much device memory a stage needs on one GPU: the estimate ``parathink plan`` prints and enforces.

Pure arithmetic from the model's shape and the stage's settings (no torch: the orchestrator image plans without it).
Every part is a count of real tensors, not a fitted constant; docs/gpu.md derives each and compares the estimate
with peaks measured on CPU (``benchmarks/memory_check.py``).

Parts, in bytes per GPU (P parameters, N = GPUs the stage runs on, ZeRO stage z, w = bytes of the compute dtype):

- **weights**: ``P x w`` (ZeRO-3: ``/ N``, plus the whole copy an RL engine samples with); a stage that samples
  with the engine adds its folded copy of a model of at most 1e9 parameters (``folded_weights``; 0 for Qwen3-4B).
- **grads**: ``P x w`` as the backward accumulates them; ZeRO-2/3 reduce them into fp32 partitions, ``4P / N``.
- **optimizer**: Adam's two fp32 moments ``8P`` and, when the parameters are half precision, their fp32 masters
  ``4P`` (``training.master_weights``, or DeepSpeed's bf16 optimiser), ``/ N`` under ZeRO >= 1; plus the step's
  transient (``step_transient``): foreach AdamW's ``sqrt(v)`` (RL's ``torch.optim.AdamW``, foreach on CUDA) and
  ``MasterAdamW``'s fp32 copy of the gradients, ``4P`` each, per shard; none for a fused AdamW (the SFT Trainer's
  ``adamw_torch_fused``), which works a tensor at a time inside its kernel.
- **activations**: what one micro-batch's backward keeps, per token and layer (``layer_activation_bytes``), times
  the micro-batch's padded tokens; with checkpointing, each layer's input plus one layer recomputed. Plus the
  attention mask (``mask_bytes``) and the final hidden states.
- **logits**: one chunk of the lm_head projection in its backward: three fp32 ``[chunk, V]`` tensors, whatever
  the compute dtype (``logits_bytes``); the update never holds [B, T, V] whole (``parathink.modeling.chunked``).
- **kv_cache**: the engine's budget. ``kv_cache_gib`` when set; else what ``gpu_memory_utilization`` of the GPU
  leaves after every other part (as vLLM sizes its cache), never more than the call's worst case; on a CPU placement
  (no capacity) the unbudgeted call's worst case. It must hold one whole rollout (``token_budget`` tokens, every
  path counted), or the stage cannot sample at all. The teacher's: vLLM's ``gpu_memory_utilization`` share.
- **workspace**: on a GPU the CUDA context, cuBLAS/NCCL workspaces and the allocator's fragmentation (1.5 GiB);
  the engine's (``engine_workspace``: a decode step with its float64 sampling tensors and the paged per-layer
  gather, or one prefill group, the larger); what ZeRO-2 allocates to reduce the gradients (``zero_buckets``:
  its two whole reduce buckets, a flattened bucket, ZeRO-2's copy of the rank's gradients, an fp32 slice; its
  all-gather allocates nothing).

A gated stage (base, sft) is the larger of itself and its gate's probe (``probe_budget``), which samples after it.

A training stage's phases do not overlap, and the estimate is the largest of them (``total``): the rollout (its KV
cache is freed before the update's activations exist; the caching allocator reuses the blocks), the backward (at
its first log-prob chunk, every kept activation with the chunk's logits and lm_head's gradient; with
checkpointing, later, a recomputed layer with the gradients made so far; at its end, a tied embedding's gradient
arriving twice more) and the optimiser step (the gradients and the step's transient). The parts are all printed;
their sum over-counts what never coexists. A stage is refused when its estimate exceeds the GPU, naming the
largest part. ``benchmarks/memory_check.py`` measures the peaks of real steps against ``total`` (docs/gpu.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parathink.engine.kv_budget import BLOCK_TOKENS, PREFILL_TOKENS, blocks_for, dtype_bytes, kv_bytes_per_token
from parathink.errors import ConfigError
from parathink.placement.roles import StageRole

GIB = 2**30
WORKSPACE = int(1.5 * GIB)  # CUDA context (~0.5 GiB), cuBLAS + NCCL workspaces, allocator fragmentation
PARTS = ("weights", "grads", "optimizer", "activations", "logits", "kv_cache", "workspace")


@dataclass(frozen=True)
class Arch:
    """A decoder's shape (Qwen3's field names)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True
    max_positions: int = 0  # max_position_embeddings: no engine call's row is longer (Engine._check); 0 unknown

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any], where: str = "model.config") -> Arch:
        keys = {"num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
                "num_key_value_heads": "kv_heads", "head_dim": "head_dim", "intermediate_size": "intermediate",
                "vocab_size": "vocab"}
        values: dict[str, Any] = {}
        for key, name in keys.items():
            if key == "head_dim" and key not in node:
                values[name] = int(node["hidden_size"]) // int(node["num_attention_heads"])
                continue
            if key not in node:
                raise ConfigError(f"{where}.{key}: missing (the memory model needs the model's shape)")
            values[name] = int(node[key])
            if values[name] < 1:
                raise ConfigError(f"{where}.{key}={node[key]!r}: must be >= 1")
        return cls(**values, tied=bool(node.get("tie_word_embeddings", True)),
                   max_positions=int(node.get("max_position_embeddings") or 0))

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def params(self) -> int:
        h = self.hidden
        layer = h * self.q + 2 * h * self.kv + self.q * h + 3 * h * self.intermediate + 2 * h + 2 * self.head_dim
        return self.layers * layer + self.vocab * h * (1 if self.tied else 2) + h


def layer_activation_bytes(arch: Arch, w: int) -> int:
    """Bytes one token keeps for one decoder layer's backward, Qwen3 under autograd in one dtype (``w`` bytes).

    RMSNorm keeps its fp32 input and its normalised output (``4h + w h``; q_norm and k_norm the same per head);
    rotary keeps ``rotate_half(q)`` and of k; attention (SDPA, GQA expanded by ``repeat_kv``) keeps q, k, v and its
    output (``4 w q``), o_proj its reshaped input (``w q``); the SwiGLU MLP keeps gate, silu(gate), up and their
    product (``4 w I``).
    """
    h, q, kv, inner = arch.hidden, arch.q, arch.kv, arch.intermediate
    norms = 2 * (4 * h + w * h) + (4 * q + w * q) + (4 * kv + w * kv)
    rotary = w * (q + kv)
    attention = 4 * w * q + w * q
    mlp = 4 * w * inner
    return norms + rotary + attention + mlp


def mask_bytes(arch: Arch, w: int, rows: int, length: int, checkpointing: bool, mask: str) -> int:
    """The attention mask of one micro-batch.

    ``additive``: the 4-D float mask ``B x L^2 x w`` that the structured collator and ``recompute_logprobs`` build
    for a structured grammar (on the device), one tensor every layer's attention saves. ``padding``: the [B, L] padding
    of a causal batch, which transformers expands to a bool ``B x L^2`` mask and which SDPA converts, in each layer,
    to a float mask of the compute dtype that the layer saves for its backward (``B x L^2 x w`` per layer kept;
    one layer's with checkpointing). ``none``: SDPA's causal path, no mask (the RL update's causal grammar).
    """
    square = rows * length * length
    if mask == "additive":
        return square * w
    if mask == "padding":
        return square + (1 if checkpointing else arch.layers) * square * w
    if mask == "none":
        return 0
    raise ValueError(f"mask={mask!r}: expected additive, padding or none")


def recomputed_layer(arch: Arch, w: int, rows: int, length: int, checkpointing: bool, mask: str = "none") -> int:
    """What exists only while checkpointing recomputes a layer for its backward: that layer's activations and, with
    a padding mask, its converted mask (0 without checkpointing: every layer's are kept from the forward)."""
    if not checkpointing:
        return 0
    own_mask = rows * length * length * w if mask == "padding" else 0
    return rows * length * layer_activation_bytes(arch, w) + own_mask


def training_activations(arch: Arch, w: int, rows: int, length: int, checkpointing: bool, mask: str = "none") -> int:
    """One micro-batch's backward: ``rows`` sequences padded to ``length`` tokens; ``mask`` as ``mask_bytes``."""
    tokens = rows * length
    per_layer = layer_activation_bytes(arch, w)
    if checkpointing:
        kept = arch.layers * arch.hidden * w + per_layer  # each layer's input, one layer recomputed at a time
    else:
        kept = arch.layers * per_layer
    kept += 2 * arch.hidden * w + arch.hidden * 4  # the final norm's input and output, the final hidden states
    return tokens * kept + mask_bytes(arch, w, rows, length, checkpointing, mask)


def logits_bytes(arch: Arch, w: int, chunk_tokens: int) -> int:
    """One chunk of the projection at its backward's peak: the fp32 log-softmax (saved, recomputed by the
    checkpoint), the gradient the gather scatters into a [chunk, V] zero tensor and the log-softmax's input
    gradient, 4 bytes each whatever ``w`` (the loss runs in fp32; the chunk's ``w``-byte logits and their cast are
    freed before the backward reaches them)."""
    del w  # the three tensors are fp32 in every precision
    return chunk_tokens * arch.vocab * 12


def head_grad_bytes(arch: Arch, w: int) -> int:
    """lm_head's gradient, ``V x h x w``: the backward's first gradient (its log-prob chunks come first)."""
    return arch.vocab * arch.hidden * w


@dataclass(frozen=True)
class Update:
    """What a training step's phases hold that the parts do not separate (``total``): the optimiser's step
    transient (inside ``optimizer``), the recomputed layer (inside ``activations``), lm_head's gradient and
    whether it is tied to the embedding."""

    transient: int = 0
    recomputed: int = 0
    head_grad: int = 0
    tied: bool = False


@dataclass(frozen=True)
class Budget:
    """One GPU's memory for one stage: parts, their total and what the GPU has."""

    parts: dict[str, int]
    estimate: int
    capacity: int
    note: str = ""
    update: Update | None = None  # a training stage's phases (``total``)

    def to_dict(self) -> dict[str, Any]:
        # a CPU placement (capacity 0: none to check) sizes a tiny model in MiB: its GiB need more digits
        digits = 2 if self.capacity else 4
        return {"estimate_gib": round(self.estimate / GIB, digits), "estimate_bytes": int(self.estimate),
                "capacity_gib": round(self.capacity / GIB, 2) if self.capacity else None,
                "parts": {k: round(v / GIB, digits) for k, v in self.parts.items()}, "note": self.note}

    def largest(self) -> str:
        return max(self.parts, key=self.parts.get)


def step_transient(params: int, w: int, gpus: int, zero: int, fused: bool = False) -> int:
    """What only the optimiser step holds (freed when it returns): foreach AdamW's ``sqrt(v)`` over every
    parameter and ``MasterAdamW``'s fp32 copy of the half-precision gradients (ZeRO-2/3 reduce into fp32
    partitions, counted in grads), ``4P`` each per shard; a fused AdamW adds nothing."""
    shard = gpus if zero >= 1 else 1
    return ((0 if fused else 4 * params) + (4 * params if w < 4 and zero < 2 else 0)) // shard


def states(params: int, w: int, gpus: int, zero: int, trains: bool, whole_copy: bool = False,
           fused: bool = False) -> dict[str, int]:
    """weights, grads and optimizer bytes per GPU (see the module docstring); optimizer includes the step's
    transient (``step_transient``)."""
    weights = params * w // (gpus if zero == 3 else 1) + (params * w if whole_copy else 0)
    if not trains:
        return {"weights": weights, "grads": 0, "optimizer": 0}
    shard = gpus if zero >= 1 else 1
    grads = params * 4 // gpus if zero >= 2 else params * w
    masters = 4 * params if w < 4 else 0
    optimizer = (8 * params + masters) // shard + step_transient(params, w, gpus, zero, fused)
    return {"weights": weights, "grads": grads, "optimizer": optimizer}


def total(parts: Mapping[str, int], update: Update | None = None) -> int:
    """The largest of the phases, over what every phase holds (weights, the optimiser's resident states, the
    workspace).

    Without ``update`` (no training step): ``weights + grads + optimizer + workspace + max(kv_cache, activations +
    logits)``. With it: the rollout (grads kept, as ZeRO's partitions are, + kv_cache); the backward at its first
    log-prob chunk (every kept activation, the chunk's logits, lm_head's gradient), with checkpointing at a
    recomputed layer (the layer inputs, that layer, the gradients so far: at most all), at its end (every gradient,
    and a tied embedding's twice more: the embedding backward's dense gradient and its sum with lm_head's, before
    autograd accumulates it); the optimiser step (the gradients and its transient).
    """
    if update is None:
        fixed = parts["weights"] + parts["grads"] + parts["optimizer"] + parts["workspace"]
        return fixed + max(parts["kv_cache"], parts["activations"] + parts["logits"])
    resident = parts["weights"] + parts["optimizer"] - update.transient + parts["workspace"]
    grads, activations = parts["grads"], parts["activations"]
    first_chunk = activations - update.recomputed + parts["logits"] + update.head_grad
    in_layer = activations + grads if update.recomputed else 0
    end = grads + (2 * update.head_grad if update.tied else 0)
    step = grads + update.transient
    return resident + max(grads + parts["kv_cache"], first_chunk, in_layer, end, step)


ENGINE_FOLD_MAX_PARAMS = 1_000_000_000  # engine.runner.FOLD_MAX_PARAMS (a test keeps them equal; no torch here)


def folded_weights(arch: Arch, w: int) -> int:
    """The engine's own copy of a small model's weights (``engine.runner.FastRunner``, up to
    ``ENGINE_FOLD_MAX_PARAMS`` parameters): each layer's projections fused and pre-transposed with the RMSNorms
    folded in (qkv, o, gate_up, down) and lm_head times the final norm, ``[h, V]``, kept for the engine's life
    (an RL stage's whole run, its update included); a larger model (Qwen3-4B) is read in place: 0."""
    if arch.params > ENGINE_FOLD_MAX_PARAMS:
        return 0
    h = arch.hidden
    layer = h * arch.q + 2 * h * arch.kv + arch.q * h + 3 * h * arch.intermediate
    return (arch.layers * layer + arch.vocab * h) * w


def decode_workspace(arch: Arch, w: int, rows: int) -> int:
    """The engine's decode step: one layer's activations and the rows' fp32 logits (twice: shaped and sampled)."""
    return rows * (layer_activation_bytes(arch, w) + 2 * 4 * arch.vocab)


def sampling_workspace(arch: Arch, rows: int) -> int:
    """The sampler's float64 tensors (``engine.sampling.draw``): the softmax and its cumulative sum, [rows, V]
    8 bytes each."""
    return rows * arch.vocab * 8 * 2


def gather_workspace(arch: Arch, w: int, rows: int, max_len: int) -> int:
    """The paged cache's per-layer window (``engine.paged``): one layer's keys and values of every row in flight
    gathered from their blocks, whole 16-token blocks ([rows, 2 kv_heads, blocks x BLOCK_TOKENS, head_dim]: the
    longest row's blocks, 4 KiB a token for Qwen3-4B in bf16)."""
    return rows * blocks_for(max_len) * BLOCK_TOKENS * 2 * arch.kv * w


def prefill_workspace(arch: Arch, w: int, prompts: int, prompt_len: int) -> int:
    """One prefill call (``engine.core._admit``: the distinct prompts in groups of at most ``PREFILL_TOKENS``
    padded tokens, one prompt at least): per token one layer's activations (no autograd: a layer's are freed before
    the next) and the logits over every position ([B, T, V], the runner picks the last ones after), plus the
    group's [B, 1, T, T] additive mask."""
    tokens = min(prompts * prompt_len, max(PREFILL_TOKENS, prompt_len))
    return tokens * (layer_activation_bytes(arch, w) + arch.vocab * w + prompt_len * w)


def engine_workspace(arch: Arch, w: int, rows: int, max_len: int, prompts: int, prompt_len: int) -> int:
    """Everything an engine call allocates beside its KV cache: the larger of a decode step (its layer, logits,
    float64 sampling tensors and the paged gather of one layer) and a prompt prefill."""
    decode = decode_workspace(arch, w, rows) + sampling_workspace(arch, rows) + gather_workspace(arch, w, rows,
                                                                                               max_len)
    return max(decode, prefill_workspace(arch, w, prompts, prompt_len))


def _zero_section(path: Any) -> dict:
    if not path:
        return {}
    from parathink.config.paths import resolve_config_path

    try:
        ds = json.loads(Path(resolve_config_path(str(path))).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}  # the stage's own validation names an unreadable file
    return dict(ds.get("zero_optimization") or {})


def _zero(path: Any) -> int:
    return int(_zero_section(path).get("stage", 0))


DS_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce_bucket_size (elements) when the json names none
RL_AUTO_BUCKET = 500_000_000  # what training.rl_parallel.deepspeed_plugin writes for "auto" (accelerate has no model
                              # to size it from there); the SFT Trainer's integration writes hidden x hidden


def largest_param(arch: Arch) -> int:
    """The elements of the model's largest parameter (the embedding, or an MLP or attention projection)."""
    return max(arch.vocab * arch.hidden, arch.hidden * arch.intermediate, arch.hidden * arch.q)


def zero_buckets(arch: Arch, path: Any, w: int, gpus: int = 1, auto: int | None = None) -> int:
    """What DeepSpeed ZeRO-1/2 allocates beside its partitions while a backward reduces the gradients, per GPU
    (``deepspeed/runtime/zero/stage_1_and_2.py``, measured on the CPU rehearsal), from the DeepSpeed json:

    - the gradient buckets (``setup_buckets``, at a backward's first gradient; freed at its end): ``torch.empty(
      reduce_bucket_size)`` whole whatever the model's size, two with ``overlap_comm`` (double buffering), with
      ``contiguous_gradients`` (DeepSpeed's default), in the parameters' dtype (``w``; ZeRO-1 with half-precision
      parameters: its fp32 accumulator, 4 bytes). ``reduce_bucket_size`` "auto" is ``auto`` elements (the
      launcher's: ``RL_AUTO_BUCKET`` for RL, hidden x hidden for the SFT Trainer); absent, DeepSpeed's 5e8;
    - a bucket's reduction (``average_tensor`` with ``reduce_scatter``, DeepSpeed's default, and its default
      ``use_multi_rank_bucket_allreduce``: ``allreduce_and_scatter`` -> ``allreduce_bucket``): every rank's slices
      of the bucket flattened into one tensor (``_flatten_dense_tensors``), the whole bucket's gradients, at most a
      bucket and the model (``min(bucket, P)`` elements), ``w`` bytes (bf16 communicates in bf16); the rehearsal's
      profile shows it at ``P x w``, not one rank's ``P / N``;
    - ZeRO-2's copy of this rank's gradients (``copy_grads_in_partition``: ``grads_in_partition = torch.empty(
      sum of params_in_partition)`` in the parameters' dtype, made at the backward's end beside the buckets): every
      parameter that has an element in this rank's partition, whole, so at most the partition and the two
      parameters that cross its ends (``P / N + 2 x largest_param``, at most ``P``); 1,119,744 B on the rehearsal's
      rank 0 (559,872 elements against a bound of 662,144);
    - with half-precision parameters the reduced slice cast to fp32 (``_add_to_grad_partition_buffer``) before it
      is added into this rank's fp32 gradient partition: at most the largest parameter or a partition, 4 bytes.

    The all-gather of the updated parameters (``allgather_bucket_size``) allocates nothing: DeepSpeed gathers into
    the flat parameter groups in place (``all_gather_into_tensor``); ``allgather_bucket_size`` only shards the
    legacy path, in views. 0 without ZeRO; ZeRO-3 is counted the same (its own buckets are not modelled)."""
    zero = _zero_section(path)
    stage = int(zero.get("stage", 0))
    if stage < 1:
        return 0
    value = zero.get("reduce_bucket_size", DS_REDUCE_BUCKET)
    bucket = (auto or arch.hidden * arch.hidden) if value == "auto" else int(float(value))
    partition = -(-arch.params // max(1, gpus))
    buffers = 0
    if zero.get("contiguous_gradients", True):
        buffer_w = 4 if stage == 1 and w < 4 else w
        buffers = (2 if zero.get("overlap_comm") else 1) * bucket * buffer_w
    # every rank's slices of a bucket are flattened for one all-reduce (reduce_scatter); without it the bucket is
    # reduced in place
    flattened = min(bucket, arch.params) * w if zero.get("reduce_scatter", True) else 0
    in_partition = min(arch.params, partition + 2 * largest_param(arch)) * w if stage == 2 else 0
    upcast = min(largest_param(arch), partition) * 4 if w < 4 else 0
    return buffers + flattened + in_partition + upcast


def _kv(arch: Arch, w: int) -> int:
    return kv_bytes_per_token(arch.layers, arch.kv_heads, arch.head_dim, w)


def _with_cache(stage: str, parts: dict[str, int], capacity: int | None, cache_gib: float, utilization: float,
                one_row: int, worst_case: int, update: Update | None = None) -> Budget:
    """Fill ``kv_cache``: the configured GiB; on a GPU what ``utilization`` of it leaves after every other counted
    part (the pool is the remainder, never more than the call's worst case); on a CPU (``capacity`` None) the
    contiguous cache the unbudgeted engine allocates, ``worst_case``. Refuse one that cannot hold one rollout."""
    if cache_gib > 0:
        parts["kv_cache"] = int(cache_gib * GIB)
        note = f"kv_cache: {stage}.kv_cache_gib"
    elif capacity is None:
        parts["kv_cache"] = worst_case
        note = "kv_cache: the engine call's worst case (a CPU: no budget)"
    else:
        # what the rollout may take: utilization x capacity less the states and every workspace counted (the
        # engine's decode step, float64 sampling, paged gather and prefill; ZeRO's buckets); the update's parts
        # come after the rollout has freed the cache
        fixed = parts["weights"] + parts["grads"] + parts["optimizer"] + parts["workspace"]
        parts["kv_cache"] = min(worst_case, max(0, int(utilization * capacity) - fixed))
        note = f"kv_cache: what {stage}.gpu_memory_utilization={utilization} of the GPU leaves"
    if parts["kv_cache"] < one_row:
        raise ConfigError(f"{stage}: the KV cache gets {parts['kv_cache'] / GIB:.2f} GiB per GPU, less than one "
                          f"rollout needs ({one_row / GIB:.2f} GiB); the largest part is {_largest(parts)} "
                          f"({parts[_largest(parts)] / GIB:.1f} GiB)")
    return Budget(parts=parts, estimate=total(parts, update), capacity=capacity or 0, note=note, update=update)


def _workspace(capacity: int | None) -> int:
    """The CUDA context, cuBLAS/NCCL workspaces and fragmentation on a GPU; nothing of it on a CPU."""
    return 0 if capacity is None else WORKSPACE


def _largest(parts: Mapping[str, int]) -> str:
    return max(parts, key=parts.get)


def _get(section, key: str, default: Any = None) -> Any:
    """A setting of a stage section: a config node or mapping (``plan``) or a dataclass (``RLConfig`` at run time)."""
    if isinstance(section, Mapping) or hasattr(section, "get") and not hasattr(section, key):
        return section.get(key, default)
    return getattr(section, key, default)


def rl_budget(arch: Arch, w: int, s, stage: str, gpus: int, capacity: int | None) -> Budget:
    """An RL stage's memory on one GPU (``s``: its section or RLConfig; ``capacity`` None: a CPU); ``kv_cache``
    is the engine's budget."""
    zero = _zero(_get(s, "deepspeed"))
    parts = states(arch.params, w, gpus, zero, trains=True, whole_copy=zero == 3)
    parts["weights"] += folded_weights(arch, w)  # the engine's copy, beside the training model
    if _get(_get(s, "rollout") or {}, "backend", "native") == "vllm":
        # vLLM colocated (parathink.vllm_rollout): its own copy of the weights, in its process on the same GPU; its
        # KV cache is the kv_cache part below. Its activations and CUDA graphs are not counted (enforce_eager).
        parts["weights"] += arch.params * w
    # A sampled row is at most token_budget tokens (its prompt and RLConfig.response_tokens: token_budget less the
    # call's longest prompt), a micro-batch at most micro_batch_size rows (training.rl.micro_batches) padded to
    # its longest: whatever a run samples, at most rows x token_budget padded tokens, and with micro_batch_tokens
    # at most that many (a row longer goes alone). Every term below grows with the padded tokens and, the masks,
    # with tokens x row length, so the largest micro-batch a run can form bounds them.
    length = int(_get(s, "token_budget"))
    rows = int(_get(s, "micro_batch_size"))
    padded = rows * length
    if int(_get(s, "micro_batch_tokens", 0) or 0):
        padded = min(padded, max(int(_get(s, "micro_batch_tokens")), length))
    checkpointing = bool(_get(s, "gradient_checkpointing"))
    # recompute_logprobs: the causal grammar runs SDPA's is_causal path (no mask); a structured one the additive
    # [B, 1, L, L] mask built on the device (modeling.attention.structured_batch_inputs)
    mask = "additive" if str(_get(s, "mode")) == "structured" else "none"
    # per row of token_budget tokens, times the rows' worth of padded tokens (exact when padded = rows x length)
    parts["activations"] = training_activations(arch, w, 1, length, checkpointing, mask=mask) * padded // length
    chunk = min(int(_get(s, "logprob_chunk_tokens", 1024)), padded)
    parts["logits"] = logits_bytes(arch, w, chunk)
    streams = int(_get(s, "rollout_batch_size"))
    rows_in_flight = streams * (int(_get(s, "num_paths", 1) or 1) if str(_get(s, "mode")) == "structured" else 1)
    prompts = min(streams, -(-streams // max(1, int(_get(s, "group_size", 1) or 1))))
    prompt_len = int(_get(s, "max_prompt_tokens", 0) or 0) or length
    parts["workspace"] = (_workspace(capacity) + zero_buckets(arch, _get(s, "deepspeed"), w, gpus, RL_AUTO_BUCKET)
                          + engine_workspace(arch, w, rows_in_flight, length, prompts, prompt_len))
    update = Update(transient=step_transient(arch.params, w, gpus, zero),
                    recomputed=recomputed_layer(arch, w, 1, length, checkpointing, mask) * padded // length,
                    head_grad=head_grad_bytes(arch, w), tied=arch.tied)
    return _with_cache(stage, parts, capacity, float(_get(s, "kv_cache_gib", 0.0) or 0.0),
                       float(_get(s, "gpu_memory_utilization", 0.9)), length * _kv(arch, w),
                       rows_in_flight * (length + 1) * _kv(arch, w), update)


def sft_budget(arch: Arch, w: int, s, gpus: int, capacity: int | None) -> Budget:
    """The SFT stage's memory on one GPU (``s``: its section): fp32 parameters, the forward in ``sft.precision``."""
    zero = _zero(_get(s, "deepspeed"))
    # fp32 parameters under autocast; DeepSpeed's bf16 mode holds them in bf16 with fp32 masters
    wp = w if (zero and str(_get(s, "precision")) == "bf16") else 4
    wa = 2 if str(_get(s, "precision")) == "bf16" else 4
    # the Trainer's AdamW is fused (adamw_torch_fused); DeepSpeed's its own, counted as foreach (conservative)
    parts = states(arch.params, wp, gpus, zero, trains=True, fused=not zero)
    rows, length = int(_get(s, "micro_batch")), int(_get(s, "max_length"))
    checkpointing = bool(_get(s, "gradient_checkpointing"))
    if str(_get(s, "collator")) == "structured":
        mask = "additive"
    else:  # a causal micro-batch of several rows pads to its longest
        mask = "padding" if rows > 1 else "none"
    parts["activations"] = training_activations(arch, wa, rows, length, checkpointing, mask=mask)
    parts["logits"] = logits_bytes(arch, wa, min(int(_get(s, "logit_chunk_tokens", 1024)), rows * length))
    parts["kv_cache"] = 0
    parts["workspace"] = _workspace(capacity) + zero_buckets(arch, _get(s, "deepspeed"), wp, gpus)
    update = Update(transient=step_transient(arch.params, wp, gpus, zero, fused=not zero),
                    recomputed=recomputed_layer(arch, wa, rows, length, checkpointing, mask),
                    head_grad=head_grad_bytes(arch, wp), tied=arch.tied)
    return Budget(parts=parts, estimate=total(parts, update), capacity=capacity or 0, update=update)


def _sampler_budget(stage: str, arch: Arch, w: int, capacity: int | None, batch: int, k: int, max_new: int,
                    mode: str, num_paths: int, cache_gib: float, utilization: float, prompt_len: int) -> Budget:
    """A model sampled by the engine (eval, a gate's probe): weights, the engine's workspaces, its KV cache."""
    parts = states(arch.params, w, 1, 0, trains=False)
    parts["weights"] += folded_weights(arch, w)
    rows = batch * (num_paths if mode == "structured" else 1)
    max_len = prompt_len + max_new + 1
    if arch.max_positions:  # the engine refuses a prompt that would run past the model's positions
        max_len = min(max_len, arch.max_positions + 1)
        prompt_len = min(prompt_len, arch.max_positions)
    prompts = min(batch, -(-batch // max(1, k)))
    parts.update(activations=0, logits=0,
                 workspace=_workspace(capacity) + engine_workspace(arch, w, rows, max_len, prompts, prompt_len))
    return _with_cache(stage, parts, capacity, cache_gib, utilization, max_len * _kv(arch, w),
                       rows * max_len * _kv(arch, w))


EVAL_PROMPT_TOKENS = 2048  # the longest prompt eval and the probes budget for (the sets' problems are shorter)


def eval_budget(arch: Arch, w: int, s, capacity: int | None) -> Budget:
    """The eval stage's memory on one GPU (``s``: its section or EvalConfig): weights, the engine, the cache."""
    sampling = _get(s, "sampling")
    return _sampler_budget("eval", arch, w, capacity, int(_get(s, "batch_size")), int(_get(s, "k", 1) or 1),
                           int(_get(sampling, "max_new_tokens")), str(_get(s, "mode", "causal")),
                           int(_get(s, "num_paths", 1) or 1), float(_get(s, "kv_cache_gib", 0.0) or 0.0),
                           float(_get(s, "gpu_memory_utilization", 0.9)), EVAL_PROMPT_TOKENS)


def probe_budget(arch: Arch, w: int, probe, capacity: int | None, utilization: float = 0.9) -> Budget:
    """A model gate's probe (``quality.probe``; ``probe``: its ProbeSpec or section): ``k`` samples of each
    problem, ``batch_size`` in flight, ``max_new_tokens`` each, its engine's KV budget the ``kv_cache`` part."""
    return _sampler_budget("probe", arch, w, capacity, int(_get(probe, "batch_size")), int(_get(probe, "k")),
                           int(_get(probe, "max_new_tokens")), str(_get(probe, "mode")),
                           int(_get(probe, "num_paths", 1) or 1), 0.0, utilization, EVAL_PROMPT_TOKENS)


def probe_kv_bytes(probe, model_config: Mapping[str, Any], dtype: str, capacity: int | None) -> int | None:
    """The KV budget a gate's probe engine gets: on a GPU of ``capacity`` bytes the ``kv_cache`` part of
    ``probe_budget`` (what ``plan`` counted for the gate); None on a CPU (the call's worst case, as counted)."""
    if capacity is None:
        return None
    arch = Arch.from_cfg(model_config, "probe model config")
    return probe_budget(arch, dtype_bytes(dtype), probe, capacity).parts["kv_cache"]


def teacher_budget(s, capacity: int | None, arch: Arch | None = None, w: int = 4) -> Budget:
    """The teacher stage's memory on one GPU: a vLLM engine in a process of its own takes
    ``gpu_memory_utilization`` of the GPU (``teacher.vllm.engine_kwargs``; vLLM's default 0.9) for its weights and
    KV cache, counted under ``kv_cache``; the parent holds no model (its CUDA context: ``workspace``). Another
    backend (an API, a server elsewhere) holds nothing here; on a CPU the engine's memory is not this process's."""
    if str(_get(s, "backend")) == "self" and arch is not None:
        # the model's own samples (teacher.selfdistill): this process's engine, num_paths samples a problem
        own = _get(s, "self") or {}
        return _sampler_budget("teacher", arch, w, capacity, int(_get(own, "batch_size", 192)),
                               int(_get(own, "num_paths", 3)), int(_get(own, "max_new_tokens", 96)), "causal", 1,
                               0.0, 0.9, EVAL_PROMPT_TOKENS)
    share = 0
    if str(_get(s, "backend")) == "vllm" and capacity is not None:
        kwargs = _get(_get(s, "vllm") or {}, "engine_kwargs") or {}
        share = int(float(_get(kwargs, "gpu_memory_utilization", 0.9) or 0.9) * capacity)
    parts = {"weights": 0, "grads": 0, "optimizer": 0, "activations": 0, "logits": 0, "kv_cache": share,
             "workspace": _workspace(capacity)}
    note = "kv_cache: the vLLM engine's gpu_memory_utilization (its weights and cache)" if share else "no model here"
    return Budget(parts=parts, estimate=sum(parts.values()), capacity=capacity or 0, note=note)


def model_arch(model: Mapping[str, Any]) -> Arch | None:
    """The shape of ``model`` (the composed config's model section): ``model.config``'s Qwen3 fields; a field it
    lacks (the tiny model's ``vocab_size``, set by its tokenizer) is read from the checkpoint's config.json
    (``builtin:NAME``: the shipped asset; a local folder). None when neither has the shape."""
    node = dict(model.get("config") or {})
    if not node:
        return None
    if "vocab_size" not in node:
        source, folder = str(model.get("source") or ""), None
        if source.startswith("builtin:"):
            folder = Path(__file__).parents[1] / "assets" / source.removeprefix("builtin:")
        elif source and "://" not in source:
            folder = Path(source)
        try:
            saved = json.loads((folder / "config.json").read_text(encoding="utf-8")) if folder else {}
        except (OSError, json.JSONDecodeError):
            saved = {}
        if "vocab_size" not in saved:
            return None
        node["vocab_size"] = saved["vocab_size"]
    return Arch.from_cfg(node, "model.config")


def stage_budget(cfg, stage: str, role: StageRole, gpus: int, capacity: int | None) -> Budget | None:
    """The memory of ``stage`` on one of its ``gpus`` devices, from the composed root config and the estimate its
    ``role`` names: a GPU of ``capacity`` bytes, or a CPU (``capacity`` None: no CUDA workspace, unbudgeted
    engines take their worst case). A stage whose gate probes its model (``role.probes_model``: base, sft) needs
    the larger of the stage and the probe (one after the other). None for a stage that holds no model (filter,
    promote) or a model config without its shape."""
    s = cfg.get(stage) or {}
    model = cfg.model
    arch = model_arch(model)
    w = dtype_bytes(str(model.get("dtype", "float32")))
    if role.memory == "teacher":
        return teacher_budget(s, capacity, arch, w)
    if arch is None or role.memory is None:
        return None
    if role.memory == "rl":
        budget = rl_budget(arch, w, s, stage, gpus, capacity)
    elif role.memory == "sft":
        budget = sft_budget(arch, w, s, gpus, capacity)
    elif role.memory == "eval":
        budget = eval_budget(arch, w, s, capacity)
    else:  # "weights"
        parts = states(arch.params, w, gpus, 0, trains=False)
        parts.update(activations=0, logits=0, kv_cache=0, workspace=_workspace(capacity))
        budget = Budget(parts=parts, estimate=total(parts), capacity=capacity or 0, note="weights")
    gate = s.get("gate") if hasattr(s, "get") else None
    if role.probes_model and gate is not None and gate.get("enabled", True) and gate.get("probe") is not None:
        probe = probe_budget(arch, w, gate.get("probe"), capacity)
        if probe.estimate > budget.estimate:
            note = f"the gate's probe (the stage before it: {budget.estimate / GIB:.2f} GiB); {probe.note}"
            budget = Budget(parts=probe.parts, estimate=probe.estimate, capacity=probe.capacity, note=note)
    return budget


def engine_kv_bytes(section, stage: str, model_config: Mapping[str, Any], dtype: str, capacity: int | None,
                    gpus: int = 1, kind: str = "rl") -> int | None:
    """The KV budget a stage's engine gets at run time: ``<stage>.kv_cache_gib`` when set; on a GPU of ``capacity``
    bytes the ``kv_cache`` part of this model's budget (what ``plan`` printed for it: its ``kind`` of estimate,
    "rl" or "eval"); None on a CPU (``capacity`` None: the call's worst case, as before budgets)."""
    if float(_get(section, "kv_cache_gib", 0.0) or 0.0) > 0:
        return int(float(_get(section, "kv_cache_gib")) * GIB)
    if capacity is None:
        return None
    arch, w = Arch.from_cfg(model_config, f"{stage} model config"), dtype_bytes(dtype)
    budget = eval_budget(arch, w, section, capacity) if kind == "eval" else rl_budget(arch, w, section, stage,
                                                                                       gpus, capacity)
    return budget.parts["kv_cache"]


def check(stage: str, budget: Budget) -> None:
    """Refuse a stage whose estimate exceeds its GPU: one line naming the stage and the largest part."""
    if budget.estimate > budget.capacity:
        big = budget.largest()
        raise ConfigError(f"cluster: {stage} needs about {budget.estimate / GIB:.1f} GiB per GPU, more than "
                          f"cluster.gpu_memory ({budget.capacity / GIB:.1f} GiB); the largest part is {big} "
                          f"({budget.parts[big] / GIB:.1f} GiB): see docs/gpu.md for the settings that lower it")

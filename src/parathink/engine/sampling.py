"""Sampling settings and the batched token sampler.

The engine reports, for every token it takes, the log-softmax of the model's *raw* logits (temperature 1)
at that token: that is what the training forward recomputes (docs/design.md, Layouts), whatever temperature,
top-p, bans or repetition penalty shaped the distribution the token was drawn from.

Randomness is counter-based: the uniform that picks a token is a hash of (seed, the sequence's index, the stream
it is written in (main, or path j of block b), the token's index in that stream), never a generator's state.
So a sequence draws the same tokens whatever else is in flight with it, in whatever order rows are admitted,
preempted and recomputed (``core``). Only rounding in the logits, which depends on the batch (a recomputed row's
keys come from a prefill, not from decode steps), can still move a draw that lands within about 1e-6 of a
boundary of the cumulative distribution: then that sequence goes on differently from there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingConfig:
    """How to sample. ``max_new_tokens`` is the budget of one sample's response, counted over every branch."""

    temperature: float = 1.0  # 0 = greedy; the paper's evaluation and RL use 1.0
    top_p: float = 1.0  # nucleus sampling; 1.0 keeps the whole distribution (on-policy RL needs that)
    max_new_tokens: int = 256  # response tokens per sample, all paths together, forced tags included
    repetition_penalty_in_paths: float = 1.0  # NPR uses 1.02 inside steps only; 1.0 = off
    seed: int | None = None  # None: one draw from torch's global generator picks the seed (the caller seeds it)
    # Streams in flight at most (RL's rollout_batch_size); forks add up to num_paths - 1 rows to each. What the KV
    # cache allocates follows from it only without a budget (Engine's kv_cache_bytes).
    batch_size: int = 64
    # Added to the sampling logits of every row (token id -> bias; -inf bans). Reported log-probs stay raw,
    # so a bias makes sampling off-policy: for benchmarks and constrained evaluation, not for RL.
    logit_bias: dict[int, float] | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingConfig.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.repetition_penalty_in_paths <= 0:
            raise ValueError(f"SamplingConfig.repetition_penalty_in_paths must be > 0, got "
                             f"{self.repetition_penalty_in_paths}")
        if self.batch_size < 1:
            raise ValueError(f"SamplingConfig.batch_size must be >= 1, got {self.batch_size}")


def penalise_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL-style repetition penalty (as in transformers): divide positive, multiply negative logits.

    logits [B, V] float, seen [B, V] bool (tokens already in the row's context).
    """
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, scaled, logits)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches ``top_p`` (the top token always stays)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # [B, V]
    probs = sorted_logits.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p  # mass before this token already reaches top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


MASK64 = (1 << 64) - 1
UNIFORM_BITS = 52  # a float64 holds them exactly (and an int64 upload)


def mix64(z: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit ints whose outputs look independent for nearby inputs."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, seq: int, stream: int = 0) -> int:
    """The key of one stream of tokens: sequence ``seq`` (prompt-major sample index) of a call seeded ``seed``;
    ``stream`` 0 is the main stream, block b's path j is ``b * 64 + j + 1``."""
    return mix64((mix64((seed & MASK64) ^ 0x9E3779B97F4A7C15) + seq * 0xD1B54A32D192ED03 + stream) & MASK64)


def uniform_bits(key: int, index: int) -> int:
    """UNIFORM_BITS random bits for token ``index`` of the stream ``key``: u = (bits + 0.5) / 2^UNIFORM_BITS."""
    return mix64((key + (index + 1) * 0x9E3779B97F4A7C15) & MASK64) >> (64 - UNIFORM_BITS)


def draw(logits: torch.Tensor, temperature: float, top_p: float, bits: torch.Tensor) -> torch.Tensor:
    """One token per row from already-shaped ``logits`` [B, V] -> [B] long; ``bits`` [B] (``uniform_bits``) are the
    rows' uniforms."""
    if temperature == 0:
        return logits.argmax(-1)
    if temperature != 1.0:
        logits = logits / temperature
    if top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    # Inverse-CDF sampling: one uniform per row against the running sum of the probabilities (far cheaper on
    # a CPU than ``multinomial`` or drawing a random number per vocabulary entry).
    # In float64: a float32 running sum moves in steps of ~6e-8, so the thousands of tokens far below that share
    # steps by rounding, are drawn far more often than their probability, and which of them is drawn flips with
    # the last bit of the logits (i.e. with the batch around the row).
    cdf = logits.double().softmax(-1).cumsum(-1)  # [B, V]
    # u lies in (0, total]: bits + 0.5 < 2^52 is exact in float64, the scale by a power of two too, and their product
    # rounds to at most the total. The first k with cdf[k] >= u has cdf[k - 1] < u <= cdf[k], an interval of nonzero
    # width, so a token of probability zero (banned, or cut by top-p) is never drawn and k < V. Only NaN logits (a
    # broken model) search past the end: the clamp keeps that row's token in range, its NaN log-prob shows it.
    u = (bits[:, None].double() + 0.5) * (cdf[:, -1:] * 2.0 ** -UNIFORM_BITS)
    return torch.searchsorted(cdf, u).clamp_(max=cdf.shape[1] - 1).squeeze(-1)

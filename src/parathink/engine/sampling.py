"""Sampling settings and the batched token sampler.

The engine reports, for every token it takes, the log-softmax of the model's *raw* logits (temperature 1)
at that token: that is what the training forward recomputes (docs/design.md, Layouts), whatever temperature,
top-p, bans or repetition penalty shaped the distribution the token was drawn from.
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
    seed: int | None = None  # None: draw from torch's global generator (the caller seeds it)
    batch_size: int = 64  # rows decoded together (forked paths count as rows)
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


def draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from already-shaped ``logits`` [B, V] -> [B] long."""
    if temperature == 0:
        return logits.argmax(-1)
    if temperature != 1.0:
        logits = logits / temperature
    if top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    # Inverse-CDF sampling: one uniform per row against the running sum of the probabilities (far cheaper on
    # a CPU than ``multinomial`` or drawing a random number per vocabulary entry).
    probs = logits.softmax(-1)  # [B, V]
    cdf = probs.cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)  # [B, 1]
    # u can round up onto the total; never return a token of probability zero (a banned one) then.
    zero = probs.gather(1, picked) == 0
    return torch.where(zero, probs.argmax(-1, keepdim=True), picked).squeeze(-1)

"""Text generators the model-based teachers sample through.

A generator is anything with ``generate_texts(prompts, sampling, num_samples) -> list[list[str]]`` (prompt-major:
``out[i]`` holds the ``num_samples`` responses to ``prompts[i]``), the contract ``parathink.engine.Engine``
also offers. ``HFGenerator`` runs ``transformers.generate``; ``engine_generator`` wraps the project's own
engine when it is installed. The teachers never care which one they got.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Sampling:
    """Field names match ``parathink.engine.SamplingConfig`` so one config section feeds either generator."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int | None = 0
    batch_size: int = 64
    ban_token_ids: tuple[int, ...] = ()  # never sampled (e.g. tag tokens inside a sequential solution)


class TextGenerator(Protocol):
    def generate_texts(self, prompts: list[str], sampling: Sampling, num_samples: int = 1) -> list[list[str]]: ...


class HFGenerator:
    """Batched sampling with ``model.generate``: left padding, responses cut at the first EOS.

    Special tokens are kept in the decoded text (``skip_special_tokens`` would delete the parallel tags a
    parallel model writes); only padding and the EOS that ends a response are removed.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model, self.tokenizer = model, tokenizer

    def generate_texts(self, prompts: list[str], sampling: Sampling, num_samples: int = 1) -> list[list[str]]:
        import torch

        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos_ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
        old_side = tok.padding_side
        tok.padding_side = "left"
        out: list[list[str]] = []
        # Each batch holds batch_size sequences: prompts x num_samples.
        per_batch = max(1, sampling.batch_size // max(1, num_samples))
        try:
            for b in range(0, len(prompts), per_batch):
                chunk = prompts[b:b + per_batch]
                enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
                enc = {k: v.to(self.model.device) for k, v in enc.items()}
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed + b)  # the same prompts and seed give the same samples
                do_sample = sampling.temperature > 0
                with torch.no_grad():
                    ids = self.model.generate(
                        **enc, do_sample=do_sample, max_new_tokens=sampling.max_new_tokens,
                        temperature=sampling.temperature if do_sample else None,
                        top_p=sampling.top_p if do_sample else None, top_k=0 if do_sample else None,
                        num_return_sequences=num_samples, pad_token_id=pad_id,
                        bad_words_ids=[[i] for i in sampling.ban_token_ids] or None)  # [len(chunk)*num_samples, P+T]
                new = ids[:, enc["input_ids"].shape[1]:].tolist()
                texts = [tok.decode(self._until_eos(row, eos_ids, pad_id), skip_special_tokens=False) for row in new]
                out += [texts[i * num_samples:(i + 1) * num_samples] for i in range(len(chunk))]
        finally:
            tok.padding_side = old_side
        return out

    @staticmethod
    def _until_eos(row: list[int], eos_ids: set[int], pad_id: int | None) -> list[int]:
        for i, t in enumerate(row):
            if t in eos_ids:
                return row[:i]
        return [t for t in row if t != pad_id]


def engine_generator(model: Any, tokenizer: Any, grammar: str = "parallel_r1") -> TextGenerator:
    """``parathink.engine.Engine`` in causal mode (sequential samples), adapted to ``Sampling``."""
    try:
        from parathink.engine import Engine, SamplingConfig
    except ImportError as e:
        raise ImportError(f"teacher generator 'engine' needs parathink.engine ({e}); use generator=hf") from None

    engine = Engine(model, tokenizer, grammar=grammar, mode="causal")

    class _Adapter:
        def generate_texts(self, prompts: list[str], sampling: Sampling, num_samples: int = 1) -> list[list[str]]:
            cfg = SamplingConfig(temperature=sampling.temperature, top_p=sampling.top_p,
                                 max_new_tokens=sampling.max_new_tokens, seed=sampling.seed,
                                 batch_size=sampling.batch_size,
                                 logit_bias={i: float("-inf") for i in sampling.ban_token_ids} or None)
            return engine.generate_texts(prompts, cfg, num_samples=num_samples)

    return _Adapter()


def tag_token_ids(tokenizer) -> tuple[int, ...]:
    """Ids of every grammar's tags that are single tokens of ``tokenizer``."""
    from parathink.formats.tags import TAGS

    vocab = tokenizer.get_vocab()
    return tuple(sorted({vocab[t] for tags in TAGS.values() for t in tags if t in vocab}))


def make_generator(kind: str, model: Any, tokenizer: Any, grammar: str = "parallel_r1") -> TextGenerator:
    if kind == "hf":
        return HFGenerator(model, tokenizer)
    if kind == "engine":
        return engine_generator(model, tokenizer, grammar)
    raise ValueError(f"teacher generator {kind!r} is unknown; expected hf or engine")

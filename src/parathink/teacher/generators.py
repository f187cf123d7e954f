"""Text generators the model-based teachers sample through.

A generator is a ``parathink.engine.texts.TextGenerator`` (``generate_texts(prompts, sampling, num_samples)``,
prompt-major, ``sampling`` a ``SamplingConfig``): the contract ``parathink.engine.Engine`` offers itself.
``HFGenerator`` runs ``transformers.generate`` behind the same contract. The teachers never care which one they
got.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from parathink.engine.texts import TextGenerator

if TYPE_CHECKING:  # the module itself stays torch-free until a generator samples
    from parathink.engine.sampling import SamplingConfig

__all__ = ["HFGenerator", "TextGenerator", "ban", "banned_token_ids", "make_generator", "tag_token_ids"]


def banned_token_ids(sampling: SamplingConfig) -> list[int]:
    """The ids ``sampling.logit_bias`` bans (bias -inf): how a teacher keeps tokens such as tags out of a sample."""
    return [i for i, b in (sampling.logit_bias or {}).items() if b == -math.inf]


def ban(token_ids) -> dict[int, float] | None:
    """``logit_bias`` that bans ``token_ids`` (None when there are none, as the engine expects for no bias)."""
    return {i: -math.inf for i in token_ids} or None


class HFGenerator:
    """Batched sampling with ``model.generate``: left padding, responses cut at the first EOS.

    Special tokens are kept in the decoded text (``skip_special_tokens`` would delete the parallel tags a
    parallel model writes); only padding and the EOS that ends a response are removed.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model, self.tokenizer = model, tokenizer

    def generate_texts(self, prompts: list[str], sampling: SamplingConfig,
                       num_samples: int = 1) -> list[list[str]]:
        import torch

        banned = banned_token_ids(sampling)
        if len(banned) != len(sampling.logit_bias or {}):
            # generate has bad_words_ids for bans but no per-token additive bias: refuse rather than ignore it
            raise ValueError("HFGenerator: logit_bias may only ban tokens (-inf); use the engine generator for "
                             "finite biases")
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
                        bad_words_ids=[[i] for i in banned] or None)  # [len(chunk)*num_samples, P+T]
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


def tag_token_ids(tokenizer) -> tuple[int, ...]:
    """Ids of every grammar's tags that are single tokens of ``tokenizer``."""
    from parathink.formats.tags import TAGS

    vocab = tokenizer.get_vocab()
    return tuple(sorted({vocab[t] for tags in TAGS.values() for t in tags if t in vocab}))


def make_generator(kind: str, model: Any, tokenizer: Any, grammar: str = "parallel_r1") -> TextGenerator:
    if kind == "hf":
        return HFGenerator(model, tokenizer)
    if kind == "engine":
        from parathink.engine import Engine

        return Engine(model, tokenizer, grammar=grammar, mode="causal")  # sequential samples
    raise ValueError(f"teacher generator {kind!r} is unknown; expected hf or engine")

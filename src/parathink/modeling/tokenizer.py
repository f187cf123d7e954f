"""The tiny default's tokenizer: byte-level BPE trained offline on the synthetic corpus.

Each digit is its own token (so the model does arithmetic digit by digit, and numbers never merge into
opaque units); merges stop when no pair reaches ``min_frequency`` (~430 tokens on the synthetic corpus).
It is saved as an ordinary fast tokenizer, so the tiny path and a Qwen3-4B path share every line after
loading. Tag tokens are *not* trained here: ``parathink.modeling.tags`` adds them later, as for any model.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS = "<|pad|>", "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """Train byte-level BPE with single-digit pre-tokenisation on ``texts``; return a fast tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable, even unseen ones
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    fast.padding_side = "right"
    return fast

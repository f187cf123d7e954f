"""Tag tokens: one special token per tag, initialised as the mean of the tag's former sub-tokens.

NPR (§3.3) adds its structure tags to the vocabulary and starts each new embedding at the mean of the
embeddings of the sub-tokens the tag text used to be split into, so a tag starts "meaning" its text instead of
a random vector that the first updates must drag into place. The same holds for the output row when the head is
untied. ``tag_ids`` is the lookup ``parathink.formats.layouts.TagIds`` relies on: every tag one id.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from parathink.formats.tags import GRAMMARS, TAGS, check_grammar


def _grammars(grammars: str | Iterable[str] | None) -> list[str]:
    if grammars is None:
        return list(GRAMMARS)
    if isinstance(grammars, str):
        grammars = [grammars]
    return [check_grammar(g) for g in grammars]


def missing_tags(tokenizer, grammars: str | Iterable[str] | None = None) -> list[str]:
    """The tags of ``grammars`` (default: all) that are not yet a single token of ``tokenizer``."""
    vocab = tokenizer.get_vocab()
    return [t for g in _grammars(grammars) for t in TAGS[g] if t not in vocab]


@torch.no_grad()
def add_tag_tokens(model, tokenizer, grammars: str | Iterable[str] | None = None) -> dict[str, int]:
    """Add the missing tags of ``grammars`` (default: all) as special tokens; return {tag: new id}.

    Embedding rows (and untied output rows) of new tags are the mean of the tag text's previous sub-token rows.
    Idempotent: a tokenizer that already has every tag is left alone.
    """
    new = missing_tags(tokenizer, grammars)
    if not new:
        return {}
    pieces = {t: tokenizer(t, add_special_tokens=False)["input_ids"] for t in new}  # before the tags exist
    tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in new}
    if max(ids.values()) >= model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    emb = model.get_input_embeddings().weight  # [V, H]
    head = model.get_output_embeddings()
    untied = head is not None and head.weight.data_ptr() != emb.data_ptr()
    for tag, i in ids.items():
        sub = torch.tensor(pieces[tag], device=emb.device)
        emb[i] = emb[sub].mean(0)
        if untied:
            head.weight[i] = head.weight[sub].mean(0)
            if getattr(head, "bias", None) is not None:
                head.bias[i] = head.bias[sub].mean(0)
    return ids


def tag_ids(tokenizer, grammar: str) -> dict[str, int]:
    """{tag: id} for ``grammar``; raises when a tag is not a single token (call ``add_tag_tokens`` first)."""
    missing = missing_tags(tokenizer, grammar)
    if missing:
        raise ValueError(f"tokenizer lacks the {grammar} tags {missing}; call parathink.modeling.tags.add_tag_tokens")
    return {t: tokenizer.convert_tokens_to_ids(t) for t in TAGS[grammar]}

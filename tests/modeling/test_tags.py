"""Tag tokens: single ids, mean-of-sub-token initialisation (NPR §3.3), idempotence, clear errors."""

from __future__ import annotations

import copy

import pytest
import torch

from parathink.formats.layouts import TagIds
from parathink.formats.tags import TAGS
from parathink.modeling import add_tag_tokens, tag_ids


def test_new_tag_rows_are_the_mean_of_their_former_pieces(tokenizer, make_model):
    tok = copy.deepcopy(tokenizer)
    model = make_model(tok)
    pieces = {t: tok(t, add_special_tokens=False)["input_ids"] for t in TAGS["parallel_r1"]}
    old = model.get_input_embeddings().weight.detach().clone()
    ids = add_tag_tokens(model, tok, "parallel_r1")
    assert set(ids) == set(TAGS["parallel_r1"])
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == len(tok)
    for tag, i in ids.items():
        assert len(pieces[tag]) > 1  # really was split before
        torch.testing.assert_close(emb[i], old[pieces[tag]].mean(0))
        assert tok(f"x {tag} y", add_special_tokens=False)["input_ids"].count(i) == 1
    assert torch.equal(emb[: old.shape[0]], old)  # existing rows untouched
    assert add_tag_tokens(model, tok, "parallel_r1") == {}  # idempotent


def test_all_grammars_and_tagids_lookup(tagged_tokenizer):
    for grammar in TAGS:
        ids = tag_ids(tagged_tokenizer, grammar)
        assert len(set(ids.values())) == len(TAGS[grammar])
        assert TagIds.from_tokenizer(tagged_tokenizer, grammar).ids == ids


def test_missing_tags_are_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="add_tag_tokens"):
        tag_ids(tokenizer, "npr")
    with pytest.raises(ValueError, match="unknown format"):
        tag_ids(tokenizer, "nope")


def test_digits_are_single_tokens(tokenizer):
    toks = tokenizer.tokenize("12 + 345 = 357")
    assert [t for t in toks if t.strip("Ġ").isdigit()] == list("12345357")
    assert tokenizer.decode(tokenizer("Tom has 17 cards.\n")["input_ids"]) == "Tom has 17 cards.\n"

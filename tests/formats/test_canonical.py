"""engine_form: traces in the exact form the structured engine writes them."""

from __future__ import annotations

import pytest

from parathink.formats import parse
from parathink.formats.canonical import engine_form


def test_parallel_r1_loses_whitespace_before_forced_tags_only():
    text = ("Let me think.\n<Parallel>\n<Path>\n1 + 2 = 3\n\\boxed{3}\n</Path>\n\n<Path>\n 4 \n</Path>\n</Parallel>\n"
            "<Summary>\nBoth give 3.\n</Summary>\n\\boxed{3}")
    out = engine_form(text, "parallel_r1")
    assert out == ("Let me think.\n<Parallel><Path>\n1 + 2 = 3\n\\boxed{3}\n</Path><Path>\n 4 \n</Path></Parallel>"
                   "<Summary>\nBoth give 3.\n</Summary>\n\\boxed{3}")
    assert parse(out, "parallel_r1").valid and len(parse(out, "parallel_r1").blocks) == 1
    assert engine_form(out, "parallel_r1") == out  # idempotent


def test_npr_and_parathinker():
    npr = "<guideline>\n<plan>a</plan>\n</guideline>\n<step>1: x</step>\n<step>2: y</step>\n<takeaway>z</takeaway>"
    assert engine_form(npr, "npr") == "<guideline>\n<plan>a</plan>\n</guideline><step>1: x</step><step>2: y</step><takeaway>z</takeaway>"
    pt = " \n<think1>a</think1>\n<think2>b</think2>\n<summary>s</summary>"
    assert engine_form(pt, "parathinker") == "<think1>a</think1><think2>b</think2><summary>s</summary>"


def test_text_without_tags_is_unchanged_and_unknown_grammar_is_an_error():
    assert engine_form("1 + 2 = 3\n\n\\boxed{3}", "parallel_r1") == "1 + 2 = 3\n\n\\boxed{3}"
    with pytest.raises(ValueError, match="unknown format"):
        engine_form("x", "nope")


@pytest.mark.parametrize("grammar", ["parallel_r1", "npr", "parathinker"])
def test_forced_tags_are_the_ones_the_engine_writes(grammar):
    """canonical.FORCED restates engine.grammar's forced tags as strings; the two must not drift apart."""
    from parathink.engine.grammar import fork_grammar
    from parathink.formats.canonical import FORCED
    from parathink.formats.layouts import TagIds
    from parathink.formats.tags import MAX_PARATHINKER_PATHS
    from parathink.modeling import load_tokenizer, resolve_source
    from parathink.modeling.tags import missing_tags

    tok = load_tokenizer(resolve_source("builtin:tiny_base"))
    tok.add_special_tokens({"additional_special_tokens": missing_tags(tok, grammar)},
                           replace_extra_special_tokens=False)
    g = fork_grammar(TagIds.from_tokenizer(tok, grammar), tok, max_paths=MAX_PARATHINKER_PATHS)
    forced_ids = {p[0] for p in g.path_open} | set(g.block_closers) | set(g.summary_open)
    assert set(tok.convert_ids_to_tokens(sorted(forced_ids))) == set(FORCED[grammar])

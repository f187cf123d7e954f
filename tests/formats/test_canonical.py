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

"""The grammar registry: every built-in grammar is one consistent ``Grammar``, and a new grammar is one ``register``
call that the parser, the teacher's traces, the canonical form, the layout and the engine's fork rules all follow."""

from __future__ import annotations

import re

import pytest

from parathink.formats import GRAMMAR_REGISTRY, GRAMMARS, TAGS, Grammar, get_grammar, parse
from parathink.formats.canonical import FORCED, engine_form
from parathink.formats.grammar import register, unregister
from parathink.formats.tags import MAX_PARATHINKER_PATHS
from parathink.formats.trace import Block, FormatError, Span, Trace

# ------------------------------------------------------------------------------------------------ built-ins

THOUGHTS = tuple(f"<think{i}>" for i in range(1, MAX_PARATHINKER_PATHS + 1))


def test_the_built_in_grammars_are_the_registry():
    assert GRAMMARS == ("parallel_r1", "npr", "parathinker") == tuple(GRAMMAR_REGISTRY)
    for name in GRAMMARS:
        g = get_grammar(name)
        assert g.name == name and TAGS[name] == g.tags and len(set(g.tags)) == len(g.tags)
        assert parse("", name).grammar == name  # the parser is the grammar's own


@pytest.mark.parametrize("name, forced, head, tail", [
    ("parallel_r1", ("<Path>", "</Parallel>", "<Summary>"), "<Parallel>", ("</Parallel>", "<Summary>")),
    ("npr", ("<step>", "<takeaway>"), "</guideline>", ("<takeaway>",)),
    ("parathinker", THOUGHTS + ("<summary>",), None, ("<summary>",)),
])
def test_each_grammar_forks_and_forces_what_the_engine_did(name, forced, head, tail):
    g = get_grammar(name)
    assert g.forced == FORCED[name] == forced
    assert g.fork_after == head and g.block_closers == tail
    assert set(g.forced) <= set(g.tags)


def test_capabilities_are_the_ones_callers_branched_on():
    r1, npr, pt = (get_grammar(n) for n in GRAMMARS)
    assert [g.forks_at_start for g in (r1, npr, pt)] == [False, False, True]  # ParaThinker's block opens the response
    assert [g.numbered_paths for g in (r1, npr, pt)] == [False, False, True]  # thought labels: relabel_thoughts
    assert [g.has_plans for g in (r1, npr, pt)] == [False, True, False]  # plans per block in the results table
    assert [g.scripted_teacher for g in (r1, npr, pt)] == [True, False, False]
    assert [g.max_paths for g in (r1, npr, pt)] == [None, None, MAX_PARATHINKER_PATHS]
    assert [g.title for g in (r1, npr, pt)] == ["Parallel-R1", "NPR", "ParaThinker"]
    assert list(pt.path_numbers()) == list(range(1, MAX_PARATHINKER_PATHS + 1)) and list(r1.path_numbers()) == [1]
    assert (npr.path_open_tag(3) + npr.label(3), pt.path_close_tag(3)) == ("<step>3:", "</think3>")


def test_a_grammar_whose_roles_are_not_its_tags_is_refused():
    with pytest.raises(ValueError, match=r"'bad': </b> not among its tags"):
        Grammar("bad", "Bad", ("<a>", "</a>", "<b>"), lambda text: Trace(text, "bad", ()), fork_after="<a>",
                path_open="<b>", path_close="</b>", summary_open="<a>", summary_close="</a>")
    with pytest.raises(ValueError, match="numbered path tags need max_paths"):
        Grammar("bad", "Bad", ("<b1>",), lambda text: Trace(text, "bad", ()), fork_after=None, path_open="<b{i}>",
                path_close="</b{i}>", summary_open="<s>", summary_close="</s>")
    with pytest.raises(ValueError, match="registered already"):
        register(get_grammar("npr"))


# ------------------------------------------------------------------------------------------------ a new grammar

TOY_TAGS = ("<fork>", "</fork>", "<b>", "</b>", "<sum>", "</sum>")
_TOY_TAG = re.compile(r"</?(?:fork|b|sum)>")
_TOY_BLOCK = re.compile(r"<fork>\s*((?:<b>.*?</b>\s*){2,})</fork>\s*<sum>(.*?)</sum>", re.S)
_TOY_PATH = re.compile(r"<b>(.*?)</b>", re.S)


def _parse_toy(text: str) -> Trace:
    """A small parser for the toy grammar: blocks of two or more ``<b>`` paths; any other tag is stray."""
    blocks, errors, end = [], [], 0
    for m in _TOY_BLOCK.finditer(text):
        if stray := _TOY_TAG.search(text, end, m.start()):
            errors.append(FormatError("stray_tag", stray.start(), stray.group(0)))
        paths = tuple(Span(p.start(1), p.end(1), p.group(1)) for p in _TOY_PATH.finditer(text, m.start(1), m.end(1)))
        blocks.append(Block(m.start(), m.end(), paths, Span(m.start(2), m.end(2), m.group(2))))
        end = m.end()
    if stray := _TOY_TAG.search(text, end):
        errors.append(FormatError("stray_tag", stray.start(), stray.group(0)))
    return Trace(text, "toy", tuple(blocks), tuple(errors))


@pytest.fixture
def toy():
    """The toy grammar, registered for one test: this one entry is all a new grammar adds outside its parser."""
    g = register(Grammar("toy", "Toy", TOY_TAGS, _parse_toy, fork_after="<fork>", path_open="<b>",
                         path_close="</b>", summary_open="<sum>", summary_close="</sum>", block_close="</fork>"))
    yield g
    unregister("toy")


def test_a_registered_grammar_parses_and_is_a_known_format(toy):
    trace = parse("Let me see.\n<fork><b>1 + 2 = 3</b>\n<b>2 + 1 = 3</b></fork><sum>both 3</sum>\n\\boxed{3}", "toy")
    assert trace.parallel and [p.text for p in trace.blocks[0].paths] == ["1 + 2 = 3", "2 + 1 = 3"]
    assert trace.blocks[0].summary.text == "both 3"
    assert parse("<b>x</b>", "toy").errors == ["stray_tag"]
    assert TAGS["toy"] == TOY_TAGS and get_grammar("toy") is toy and "toy" not in GRAMMARS  # GRAMMARS: built-ins


def test_the_teacher_writes_it_and_the_canonical_form_strips_before_its_forced_tags(toy):
    from parathink.teacher.traces import parallel_block, voted_trace

    block = parallel_block(["a\n\\boxed{1}", "b\n\\boxed{1}"], "Most give 1.", "toy")
    assert block == "<fork>\n<b>\na\n\\boxed{1}\n</b>\n<b>\nb\n\\boxed{1}\n</b>\n</fork>\n<sum>\nMost give 1.\n</sum>"
    assert engine_form(block, "toy") == ("<fork><b>\na\n\\boxed{1}\n</b><b>\nb\n\\boxed{1}\n</b></fork><sum>\n"
                                         "Most give 1.\n</sum>")
    response, answers, vote = voted_trace(["x\n\\boxed{4}", "y\n\\boxed{4}", "z\n\\boxed{5}"], grammar="toy")
    trace = parse(response, "toy")
    assert trace.parallel and len(trace.blocks[0].paths) == 3 and answers == ["4", "4", "5"] and vote == "4"


def test_its_layout_and_fork_rules_come_from_the_entry(toy):
    from parathink.engine.grammar import fork_grammar
    from parathink.formats.layouts import REGION_PATH, REGION_SUMMARY, TagIds, build_layout

    ids = {t: 100 + i for i, t in enumerate(TOY_TAGS)}
    fork, fork_c, b, b_c, s, s_c = (ids[t] for t in TOY_TAGS)
    tags = TagIds.from_mapping("toy", ids)
    assert (tags.block_open, tags.path_open, tags.block_close, tags.summary_open) == (
        {fork}, {b}, {fork_c}, {s})

    g = fork_grammar(tags, tokenizer=None, max_paths=3)  # no path label: the tokenizer is never asked
    assert (g.opener, g.path_open, g.path_close) == (fork, ((b,),) * 3, (b_c,) * 3)
    assert (g.block_closers, g.summary_close, g.plan, g.max_paths) == ((fork_c, s), s_c, None, 3)

    # prompt, <fork>, path 1 (3 tokens), path 2 (2 tokens), </fork>, <sum> x </sum>
    seq = [1, 2, fork, b, 5, b_c, b, 6, b_c, fork_c, s, 7, s_c]
    lay = build_layout(seq, tags, "toy")
    assert lay.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 9]  # both paths start at p + 1 = 3
    assert lay.path_ids.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0]
    assert lay.region[3].item() == REGION_PATH and lay.region[11].item() == REGION_SUMMARY
    assert not lay.attention_mask[7, 4] and lay.attention_mask[7, 2] and lay.attention_mask[11, 4:9].all()


def test_a_numbered_grammar_that_opens_the_response_is_capped_and_forks_at_start_only():
    from parathink.config.teacher import TeacherConfig
    from parathink.engine.core import Engine
    from parathink.errors import ConfigError

    class NoTags:  # a tokenizer without the tags: causal sampling, so the cap is the only check before the model
        unk_token_id = 0

        def convert_tokens_to_ids(self, tag):
            return 0

    tags = ("<t1>", "</t1>", "<t2>", "</t2>", "<s>", "</s>")
    register(Grammar("two", "Two", tags, _parse_toy, fork_after=None, path_open="<t{i}>", path_close="</t{i}>",
                     summary_open="<s>", summary_close="</s>", max_paths=2))
    try:
        with pytest.raises(ValueError, match=r"^two has tags for at most 2 paths, asked 3$"):
            Engine(object(), NoTags(), grammar="two", num_paths=3)
        assert get_grammar("two").forced == ("<t1>", "<t2>", "<s>")
        with pytest.raises(ConfigError, match=r"^teacher.self.fork: a Two block opens the response; only 'start'"):
            TeacherConfig.from_cfg({"backend": "self", "grammar": "two", "self": {"fork": "agreed"}})
        with pytest.raises(ConfigError, match=r"^teacher.grammar: backend scripted writes parallel_r1 traces only, "
                                              r"got 'two'$"):
            TeacherConfig.from_cfg({"backend": "scripted", "grammar": "two"})
    finally:
        unregister("two")


def test_unregistered_it_is_unknown_again(toy):
    unregister("toy")
    try:
        with pytest.raises(ValueError, match="unknown format 'toy'; expected one of parallel_r1, npr, parathinker"):
            parse("x", "toy")
        with pytest.raises(ValueError, match="unknown format 'toy'"):
            engine_form("x", "toy")
    finally:
        register(toy)  # for the fixture's own cleanup

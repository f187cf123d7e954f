"""Property tests: no string crashes a parser, and parallel_r1's verdict matches an independent recognizer.

The oracle is the grammar of docs/design.md written as one regular expression (a different construction from
the parser's state machine), so a disagreement on any generated string is a bug in one of them.
"""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parathink.formats import parse

TAG = r"</?(?:Parallel|Path|Summary)>"
FREE = rf"(?:(?!{TAG})[\s\S])*"  # any text without a tag
# Non-empty after stripping: some non-space character that is not the start of a tag.
NONEMPTY = r"(?=\s*(?:[^\s<]|<(?!/?(?:Parallel|Path|Summary)>)))"
BLOCK = (rf"<Parallel>\s*(?:<Path>{NONEMPTY}{FREE}</Path>\s*){{2,}}</Parallel>\s*"
         rf"<Summary>{NONEMPTY}{FREE}</Summary>")
ORACLE = re.compile(rf"{FREE}(?:{BLOCK}{FREE})*")


def oracle_valid(text: str) -> bool:
    return ORACLE.fullmatch(text) is not None


TAGS = ["<Parallel>", "</Parallel>", "<Path>", "</Path>", "<Summary>", "</Summary>"]
pieces = st.one_of(
    st.sampled_from(TAGS),
    st.sampled_from([" ", "\n", "  \n ", "x", "2+2=4", "<", ">", "</", "<Pat", "Path>", "\\boxed{4}"]),
    st.text(max_size=40),
)
soup = st.lists(pieces, max_size=400).map("".join).filter(lambda s: len(s) <= 10_000)


def check_invariants(text: str, grammar: str) -> None:
    t = parse(text, grammar)
    assert t.valid == (not t.errors)
    assert t.parallel == (t.valid and bool(t.blocks))
    for b in t.blocks:
        assert 0 <= b.start < b.end <= len(text)
        for span in (*b.paths, b.summary, *b.plans):
            assert text[span.start:span.end] == span.text


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(soup)
def test_tag_soup_matches_oracle(text):
    check_invariants(text, "parallel_r1")
    assert parse(text).valid == oracle_valid(text), text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.sampled_from(["<guideline>", "</guideline>", "<plan>", "</plan>", "<step>", "</step>", "<takeaway>",
                     "</takeaway>", "<think1>", "</think1>", "<think2>", "</think2>", "<think3>", "</think3>",
                     "<summary>", "</summary>", "1: ", "2: ", " ", "x"]),
    st.text(max_size=30)), max_size=400).map("".join))
def test_other_grammars_never_crash(text):
    check_invariants(text, "npr")
    check_invariants(text, "parathinker")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.lists(pieces, min_size=1, max_size=30).map("".join), st.integers(50, 2000)).map(
    lambda t: (t[0] * t[1])[:10_000]))
def test_long_tag_soup(text):
    check_invariants(text, "parallel_r1")
    assert parse(text).valid == oracle_valid(text)


# Mutations of valid traces: each mutated string gets the oracle's verdict.
words = st.text(alphabet="abc 0123456789+=\n", min_size=1, max_size=20).filter(lambda s: s.strip())
valid_block = st.builds(
    lambda paths, summary, ws: "<Parallel>" + ws + "".join(f"<Path>{p}</Path>{ws}" for p in paths)
    + "</Parallel>" + ws + f"<Summary>{summary}</Summary>",
    st.lists(words, min_size=2, max_size=5), words, st.sampled_from(["", " ", "\n"]),
)
valid_trace = st.lists(st.tuples(words, valid_block), min_size=1, max_size=4).map(
    lambda parts: "".join(a + b for a, b in parts))


@st.composite
def mutated(draw):
    text = draw(valid_trace)
    assert parse(text).parallel and oracle_valid(text)
    for _ in range(draw(st.integers(1, 3))):
        tags = [m for m in re.finditer(TAG, text)]
        kind = draw(st.sampled_from(["delete_tag", "duplicate_tag", "insert_tag", "insert_text", "empty"]))
        if kind in ("delete_tag", "duplicate_tag") and tags:
            m = draw(st.sampled_from(tags))
            repl = "" if kind == "delete_tag" else m.group(0) * 2
            text = text[:m.start()] + repl + text[m.end():]
        elif kind == "insert_tag":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(TAGS)) + text[at:]
        elif kind == "insert_text":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(words) + text[at:]
        elif kind == "empty":
            text = re.sub(r"<Path>[^<]*</Path>", "<Path> </Path>", text, count=1)
    return text


@settings(max_examples=3000, deadline=None)
@given(mutated())
def test_mutations_match_oracle(text):
    check_invariants(text, "parallel_r1")
    assert parse(text).valid == oracle_valid(text), text


@settings(max_examples=500, deadline=None)
@given(valid_trace)
def test_generated_valid_traces_parse(text):
    t = parse(text)
    assert t.parallel and t.errors == []

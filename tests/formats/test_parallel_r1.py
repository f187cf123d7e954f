"""Hand-written cases: one per error kind, and valid traces of several shapes."""

import pytest

from parathink.formats import parse

P = "<Parallel>"
PC = "</Parallel>"


def blk(*paths: str, summary: str = "so 4") -> str:
    return P + "".join(f"<Path>{p}</Path>" for p in paths) + PC + f"<Summary>{summary}</Summary>"


VALID = [
    "no blocks at all, just reasoning \\boxed{4}",
    "think " + blk("2+2=4", "4") + " answer \\boxed{4}",
    blk("a", "b", "c") + " mid " + blk("d", "e") + " end",
    f"{P}\n  <Path> a </Path>\n\n<Path>b</Path>\n{PC}\n\n<Summary>s</Summary>",
    "<parallel> lowercase is plain text </parallel> and <Paths> too",
]


@pytest.mark.parametrize("text", VALID)
def test_valid(text):
    t = parse(text)
    assert t.valid, t.errors
    assert t.parallel == (P in text)


@pytest.mark.parametrize(
    "text, code",
    [
        (blk("only one"), "too_few_paths"),
        (f"{P}{PC}<Summary>s</Summary>", "too_few_paths"),
        (blk("a", "  \n "), "empty_path"),
        (blk("a", "b", summary=" "), "empty_summary"),
        ("x <Path>a</Path>", "stray_tag"),
        ("x </Parallel>", "stray_tag"),
        ("x <Summary>s</Summary>", "stray_tag"),
        (f"{P}<Path>a</Path><Summary>s</Summary>", "stray_tag"),
        (f"{P}<Path>a</Path><Path>b</Path>", "unclosed_tag"),
        (f"{P}<Path>a", "unclosed_tag"),
        (f"{P}<Path>a</Path><Path>b</Path>{PC}<Summary>s", "unclosed_tag"),
        (f"{P}<Path>a</Path><Path>b</Path>{PC}", "missing_summary"),
        (f"{P}<Path>a</Path><Path>b</Path>{PC} text <Summary>s</Summary>", "missing_summary"),
        (f"{P}<Path>a</Path>{P}<Path>b</Path>", "nested_block"),
        (f"{P}<Path>a {P}</Path>", "nested_block"),
        (f"{P}<Path>a</Path> chatter <Path>b</Path>{PC}<Summary>s</Summary>", "text_between_paths"),
        (f"{P} intro <Path>a</Path><Path>b</Path>{PC}<Summary>s</Summary>", "text_between_paths"),
    ],
)
def test_each_error_kind(text, code):
    t = parse(text)
    assert not t.valid and not t.parallel
    assert code in t.errors, (code, t.errors)


def test_spans_point_into_the_text():
    text = "lead " + blk("first path", "second", "third") + " tail"
    t = parse(text)
    (b,) = t.blocks
    assert [p.text for p in b.paths] == ["first path", "second", "third"]
    for span in (*b.paths, b.summary):
        assert text[span.start:span.end] == span.text
    assert text[b.start:].startswith(P) and text[:b.end].endswith("</Summary>")
    assert b.start == 5


def test_one_bad_block_invalidates_the_whole_trace():
    t = parse(blk("a", "b") + " " + blk("c"))
    assert not t.valid and t.errors == ["too_few_paths"]

import pytest

from parathink.formats import parse


def npr_block(plans, steps=None, takeaway="t"):
    steps = plans if steps is None else steps
    g = "<guideline>" + "".join(f"<plan>{i}: {p}</plan>" for i, p in plans) + "</guideline>"
    s = "".join(f"<step>{i}: {p}</step>" for i, p in steps)
    return g + s + f"<takeaway>{takeaway}</takeaway>"


def test_npr_valid_and_spans():
    text = "q " + npr_block([(1, "add"), (2, "check")]) + " then " + npr_block([(1, "x")]) + " \\boxed{3}"
    t = parse(text, "npr")
    assert t.valid and t.parallel and len(t.blocks) == 2
    b = t.blocks[0]
    assert [p.text for p in b.plans] == ["1: add", "2: check"]
    assert [p.text for p in b.paths] == ["1: add", "2: check"]
    assert text[b.summary.start:b.summary.end] == "t"


@pytest.mark.parametrize(
    "text, code",
    [
        (npr_block([(1, "a"), (2, "b")], steps=[(1, "a")]), "plan_step_mismatch"),
        (npr_block([(1, "a"), (2, "b")], steps=[(1, "a"), (3, "b")]), "plan_step_mismatch"),
        ("<guideline></guideline><takeaway>t</takeaway>", "too_few_paths"),
        (npr_block([(1, "a")], steps=[(1, " ")]).replace("<step>1:  </step>", "<step> </step>"), "empty_path"),
        (npr_block([(1, "a")], takeaway=" "), "empty_summary"),
        ("<step>1: x</step>", "stray_tag"),
        ("<guideline><plan>1: a</plan></guideline><step>1: a</step>", "missing_summary"),
        ("<guideline><plan>1: a</plan>", "unclosed_tag"),
        ("<guideline><plan>1: a</plan><guideline>", "nested_block"),
        ("<guideline><plan>1: a</plan></guideline><step>1: a</step> chat <takeaway>t</takeaway>",
         "text_between_paths"),
    ],
)
def test_npr_error_kinds(text, code):
    t = parse(text, "npr")
    assert not t.valid and code in t.errors, t.errors


def think_block(*paths, summary="s"):
    return "".join(f"<think{i}>{p}</think{i}>" for i, p in enumerate(paths, 1)) + f"<summary>{summary}</summary>"


def test_parathinker_valid():
    t = parse(think_block("a", "b", "c") + " \\boxed{1}", "parathinker")
    assert t.valid and t.parallel and [p.text for p in t.blocks[0].paths] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "text, code",
    [
        (think_block("a"), "too_few_paths"),
        ("<think1>a</think1><think3>b</think3><summary>s</summary>", "stray_tag"),
        ("<think2>a</think2>", "stray_tag"),
        (think_block("a", ""), "empty_path"),
        (think_block("a", "b", summary=""), "empty_summary"),
        ("<think1>a</think1><think2>b</think2>", "missing_summary"),
        ("<think1>a", "unclosed_tag"),
        ("<think1>a<think2>b</think2>", "nested_block"),
        ("<think1>a</think1> x <think2>b</think2><summary>s</summary>", "text_between_paths"),
    ],
)
def test_parathinker_error_kinds(text, code):
    t = parse(text, "parathinker")
    assert not t.valid and code in t.errors, t.errors


def test_unknown_grammar_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        parse("x", "nope")

import pytest

from parathink.grading import extract_answer, grade, is_correct


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{7} then broken \\boxed{3", "7"),  # the last balanced one
        ("\\boxed {5}", "5"),
        ("work\nFinal Answer: 12.\nmore", "12"),
        ("Final Answer: 3\nFinal Answer: 4", "4"),
        ("\\boxed{9}\nFinal Answer: 4", "9"),  # boxed wins over the line
        ("nothing here", None),
        ("Final Answer:   ", None),
        ("\\boxed{", None),
    ],
)
def test_extract(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "pred, gold, ok",
    [
        ("42", "42", True), ("42", 42, True), ("42.0", "42", True), ("1,000", "1000", True),
        ("\\frac{1}{2}", "0.5", True), ("\\frac{2}{4}", "\\frac{1}{2}", True), ("$7$", "7", True),
        ("41", "42", False), ("(1,2)", "12", False), (None, "1", False), ("", "1", False),
        ("x^2+2x+1", "(x+1)^2", True), ("\\sqrt{2}", "1.41", False), ("garbage }{", "3", False),
    ],
)
def test_is_correct(pred, gold, ok):
    assert is_correct(pred, gold) is ok


def test_grade():
    assert grade("... \\boxed{-3}", "-3") == ("-3", True)
    assert grade("no answer", "3") == (None, False)


def test_a_dollar_sign_escaped_in_latex_is_a_currency_mark():
    assert grade("so \\boxed{\\$18}", "18") == ("\\$18", True)
    assert grade("so \\boxed{\\$18.50}", "18.5")[1] is True
    assert grade("so \\boxed{\\$19}", "18")[1] is False


@pytest.mark.parametrize("gold", [["1"], True, {"a": 1}, None, 1.5 + 2j])
def test_a_gold_answer_of_the_wrong_type_is_refused(gold):
    with pytest.raises(ValueError, match=type(gold).__name__):
        grade("\\boxed{1}", gold)


def _reference_extract(text):
    """The specification, written the slow obvious way: the last ``\\boxed`` whose braces balance."""
    at = text.rfind("\\boxed")
    while at != -1:
        i = at + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return text[i + 1:j].strip()
        at = text.rfind("\\boxed", 0, at)
    return None


def test_extraction_agrees_with_its_specification_on_random_brace_soup():
    import random

    rng = random.Random(0)
    pieces = ["\\boxed", "\\boxed ", "{", "}", "1", "x", " ", "\\frac", "Final Answer: 7\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        want = _reference_extract(text)
        if want is not None:  # else the "Final Answer:" line decides
            assert extract_answer(text) == want, text


ADVERSARIAL = ["\\boxed{" * 16000, "\\boxed{}" * 8000 + "{" * 8000, "Final Answer:" + " " * 64000 + "x",
               "}" * 32000 + "\\boxed{" * 4000]


def test_adversarial_responses_are_graded_in_linear_time(tmp_path):
    """A hang guard, not a speed test: the process is killed past 20 s of CPU. The quadratic extractor needed
    ~16 s of CPU for 8,000 repeats of ``\\boxed{`` (so ~64 s for the 16,000 here); a linear one well under 1 s."""
    import json
    import resource
    import subprocess
    import sys

    (tmp_path / "in.json").write_text(json.dumps(ADVERSARIAL))
    code = ("import json, sys; from parathink.grading import grade; "
            "print([grade(r, '18')[1] for r in json.load(open(sys.argv[1]))])")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.json")], capture_output=True, text=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CPU, (20, 20)), timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "[False, False, False, False]", proc.stderr[-1000:]

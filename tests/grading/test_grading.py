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

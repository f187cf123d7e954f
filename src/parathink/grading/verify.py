"""Equivalence of an extracted answer with the gold one, through math-verify.

Most answers in our data are plain numbers, and math-verify costs ~0.5 ms a call; a cheap exact check on
normalised strings settles those first, so grading stays out of the way of the RL reward loop. An answer longer
than ``MAX_VERIFY_CHARS`` is compared as a string only: math-verify's parse grows with the text (a 10 KB one took
~1 s), and no final answer of a math problem is that long.

The gold answer must be a string or a number: a list, a bool or a dict would be graded by its text (``["1"]``
against a response of 1 counted correct), so it is refused with ``ValueError``.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_STRIP = str.maketrans("", "", " $")
MAX_VERIFY_CHARS = 1000


def _normalise(s: str) -> str:
    s = s.strip().replace("\\$", "").translate(_STRIP)  # \$18 is LaTeX's dollar sign: a currency mark, like $
    if _THOUSANDS.fullmatch(s):  # 1,000 -> 1000, but (1,2) stays a pair
        s = s.replace(",", "")
    if s.startswith("\\text{") and s.endswith("}"):
        s = s[6:-1]
    return s


@lru_cache(maxsize=65536)
def _verify(extracted: str, gold: str) -> bool:
    from math_verify import parse, verify

    # math-verify's timeouts use signals, which only work in the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_p = parse(_as_math(gold), parsing_timeout=timeout)
        pred_p = parse(_as_math(extracted), parsing_timeout=timeout)
        return bool(verify(gold_p, pred_p, timeout_seconds=timeout))
    except Exception:  # a malformed model answer is a wrong answer, never a crash
        return False


def _as_math(s: str) -> str:
    s = s.strip()
    return s if "$" in s or "\\boxed" in s else f"${s}$"


def check_gold(gold: object) -> None:
    if not isinstance(gold, (str, int, float)) or isinstance(gold, bool):
        raise ValueError(f"a gold answer must be a string or a number, got {type(gold).__name__}")


def is_correct(extracted: str | None, gold: str | int | float) -> bool:
    """True when ``extracted`` equals ``gold`` mathematically."""
    check_gold(gold)
    if extracted is None:
        return False
    a, b = _normalise(str(extracted)), _normalise(str(gold))
    if not a:
        return False
    if a == b:
        return True
    if _NUMBER.fullmatch(a) and _NUMBER.fullmatch(b):
        return float(a) == float(b)
    if len(a) > MAX_VERIFY_CHARS or len(b) > MAX_VERIFY_CHARS:
        return False
    return _verify(a, b)

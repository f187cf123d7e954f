"""Answer extraction (DESIGN.md, Grading): the last ``\\boxed{…}`` with balanced braces, else the last
``Final Answer: …`` line (Parallel-R1's public code reads that line)."""

from __future__ import annotations

import re

_BOXED = "\\boxed"
_FINAL = re.compile(r"Final Answer\s*:\s*(.*?)\s*$", re.MULTILINE)


def _boxed_content(text: str, start: int) -> str | None:
    """Content of ``\\boxed{…}`` whose ``\\boxed`` starts at ``start``; None when unbalanced."""
    i = start + len(_BOXED)
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def extract_answer(text: str) -> str | None:
    """The final answer of a response, or None when it states none."""
    at = text.rfind(_BOXED)
    while at != -1:
        content = _boxed_content(text, at)
        if content is not None:
            return content.strip()
        at = text.rfind(_BOXED, 0, at)
    finals = _FINAL.findall(text)
    for line in reversed(finals):
        answer = line.strip().rstrip(".").strip()
        if answer:
            return answer
    return None

"""The tag vocabulary of each grammar (docs/design.md, Formats).

These strings become special tokens of the tokenizer (one id each), so the layout can be derived from
token ids alone and the engine can fork on a single id.
"""

from __future__ import annotations

MAX_PARATHINKER_PATHS = 16

PARALLEL_R1 = ("<Parallel>", "</Parallel>", "<Path>", "</Path>", "<Summary>", "</Summary>")
NPR = (
    "<guideline>", "</guideline>", "<plan>", "</plan>",
    "<step>", "</step>", "<takeaway>", "</takeaway>",
)
PARATHINKER = tuple(
    tag
    for i in range(1, MAX_PARATHINKER_PATHS + 1)
    for tag in (f"<think{i}>", f"</think{i}>")
) + ("<summary>", "</summary>")

TAGS: dict[str, tuple[str, ...]] = {
    "parallel_r1": PARALLEL_R1,
    "npr": NPR,
    "parathinker": PARATHINKER,
}

GRAMMARS = tuple(TAGS)


def check_grammar(grammar: str) -> str:
    if grammar not in TAGS:
        raise ValueError(f"unknown format {grammar!r}; expected one of {', '.join(GRAMMARS)}")
    return grammar

"""The ParaThinker grammar (docs/design.md, Formats; ParaThinker §3).

    block := <think1> text </think1> ws <think2> text </think2> ws ... <thinkN> text </thinkN> ws
             <summary> text </summary>

Thoughts are numbered 1..N in order (N >= 2, at most tags.MAX_PARATHINKER_PATHS); the summary reads them
all. In ParaThinker the block follows the prompt directly; here it may sit anywhere in the response, like
the other grammars, so one parser and one layout serve all three.
"""

from __future__ import annotations

import re

from parathink.formats.trace import Block, FormatError, Span, Trace

GRAMMAR = "parathinker"
MIN_PATHS = 2
_TAG = re.compile(r"<(/?)(?:think(\d+)|(summary))>")

_OUT, _BETWEEN, _THINK, _SUMMARY = range(4)


def parse(text: str) -> Trace:
    errors: list[FormatError] = []
    blocks: list[Block] = []
    state = _OUT
    block_start = content_start = gap_start = 0
    paths: list[Span] = []

    def err(code: str, offset: int, detail: str = "") -> None:
        errors.append(FormatError(code, offset, detail))

    for m in _TAG.finditer(text):
        closing = m.group(1) == "/"
        index = int(m.group(2)) if m.group(2) else None  # None: the summary tag
        at, after = m.start(), m.end()

        if state == _OUT:
            if index == 1 and not closing:
                state, block_start, paths, content_start = _THINK, at, [], after
            else:
                err("stray_tag", at, m.group(0))
        elif state == _BETWEEN:
            if text[gap_start:at].strip():
                err("text_between_paths", gap_start)
            if index == len(paths) + 1 and not closing:
                state, content_start = _THINK, after
            elif index is None and not closing:
                if len(paths) < MIN_PATHS:
                    err("too_few_paths", block_start, f"{len(paths)} thought(s)")
                state, content_start = _SUMMARY, after
            else:
                err("stray_tag", at, m.group(0))
        elif state == _THINK:
            if index == len(paths) + 1 and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_path", content_start)
                paths.append(Span(content_start, at, content))
                state, gap_start = _BETWEEN, after
            elif index is not None and not closing:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        else:  # _SUMMARY
            if index is None and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_summary", content_start)
                blocks.append(Block(block_start, after, tuple(paths), Span(content_start, at, content)))
                state = _OUT
            elif index is not None and not closing:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))

    if state == _BETWEEN:
        err("missing_summary", len(text))
    elif state != _OUT:
        err("unclosed_tag", len(text), "<summary>" if state == _SUMMARY else f"<think{len(paths) + 1}>")
    return Trace(text, GRAMMAR, tuple(blocks), tuple(errors))

"""The Parallel-R1 grammar (docs/design.md, Formats; Parallel-R1 §3).

    block := <Parallel> ws (<Path> text </Path> ws){2,} </Parallel> ws <Summary> text </Summary>

Blocks may appear anywhere and any number of times; text outside blocks is free. Any tag out of place,
an unclosed tag, or a block with fewer than two paths makes the whole trace invalid. The parser is one
regex scan plus a small state machine, so it runs in every reward call at tens of thousands of traces/s.
"""

from __future__ import annotations

import re

from parathink.formats.trace import Block, FormatError, Span, Trace

GRAMMAR = "parallel_r1"
MIN_PATHS = 2
_TAG = re.compile(r"<(/?)(Parallel|Path|Summary)>")

# States of the scanner.
_OUT, _BLOCK, _PATH, _AFTER, _SUMMARY = range(5)


def parse(text: str) -> Trace:
    errors: list[FormatError] = []
    blocks: list[Block] = []
    state = _OUT
    block_start = 0
    paths: list[Span] = []
    content_start = 0  # where the open path's / summary's content begins
    gap_start = 0  # where the text since the last tag begins (inside a block)

    def err(code: str, offset: int, detail: str = "") -> None:
        errors.append(FormatError(code, offset, detail))

    for m in _TAG.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        at, after = m.start(), m.end()

        if state == _OUT:
            if name == "Parallel" and not closing:
                state, block_start, paths, gap_start = _BLOCK, at, [], after
            else:
                err("stray_tag", at, m.group(0))
        elif state == _BLOCK:
            if text[gap_start:at].strip():
                err("text_between_paths", gap_start)
            if name == "Path" and not closing:
                state, content_start = _PATH, after
            elif name == "Parallel" and closing:
                if len(paths) < MIN_PATHS:
                    err("too_few_paths", block_start, f"{len(paths)} path(s)")
                state, gap_start = _AFTER, after
            elif name == "Parallel":
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        elif state == _PATH:
            if name == "Path" and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_path", content_start)
                paths.append(Span(content_start, at, content))
                state, gap_start = _BLOCK, after
            elif name == "Parallel" and not closing:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        elif state == _AFTER:
            if text[gap_start:at].strip() or not (name == "Summary" and not closing):
                # The block ended without its summary; re-read this tag as outside text.
                err("missing_summary", gap_start)
                state = _OUT
                if name == "Parallel" and not closing:
                    state, block_start, paths, gap_start = _BLOCK, at, [], after
                else:
                    err("stray_tag", at, m.group(0))
            else:
                state, content_start = _SUMMARY, after
        else:  # _SUMMARY
            if name == "Summary" and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_summary", content_start)
                blocks.append(Block(block_start, after, tuple(paths), Span(content_start, at, content)))
                state = _OUT
            elif name == "Parallel" and not closing:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))

    if state == _AFTER:
        err("missing_summary", len(text))
    elif state != _OUT:
        err("unclosed_tag", len(text), {_BLOCK: "<Parallel>", _PATH: "<Path>", _SUMMARY: "<Summary>"}[state])
    return Trace(text, GRAMMAR, tuple(blocks), tuple(errors))

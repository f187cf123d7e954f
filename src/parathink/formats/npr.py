"""The NPR grammar (docs/design.md, Formats; NPR §3, "Native Parallel Reasoner").

    block := <guideline> ws (<plan> i: text </plan> ws)+ </guideline> ws
             (<step> i: text </step> ws){one per plan} <takeaway> text </takeaway>

Blocks repeat; the user-facing answer follows the last one. A plan is a path's one-line intent, a step the
path itself, the takeaway the summary. NPR forks one branch per plan (1-5 plans), so a block needs at least
one plan, and exactly one step per plan with the same labels (``plan_step_mismatch`` otherwise).
"""

from __future__ import annotations

import re

from parathink.formats.trace import Block, FormatError, Span, Trace

GRAMMAR = "npr"
MIN_PATHS = 1
_TAG = re.compile(r"<(/?)(guideline|plan|step|takeaway)>")
_LABEL = re.compile(r"\s*(\d+)\s*:")

_OUT, _GUIDE, _PLAN, _STEPS, _STEP, _TAKEAWAY = range(6)


def _labels(spans: list[Span]) -> list[str | None]:
    out = []
    for s in spans:
        m = _LABEL.match(s.text)
        out.append(m.group(1) if m else None)
    return out


def parse(text: str) -> Trace:
    errors: list[FormatError] = []
    blocks: list[Block] = []
    state = _OUT
    block_start = content_start = gap_start = 0
    plans: list[Span] = []
    steps: list[Span] = []

    def err(code: str, offset: int, detail: str = "") -> None:
        errors.append(FormatError(code, offset, detail))

    for m in _TAG.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        at, after = m.start(), m.end()
        opening = not closing

        if state == _OUT:
            if name == "guideline" and opening:
                state, block_start, plans, steps, gap_start = _GUIDE, at, [], [], after
            else:
                err("stray_tag", at, m.group(0))
        elif state == _GUIDE:
            if text[gap_start:at].strip():
                err("text_between_paths", gap_start)
            if name == "plan" and opening:
                state, content_start = _PLAN, after
            elif name == "guideline" and closing:
                if len(plans) < MIN_PATHS:
                    err("too_few_paths", block_start, "no plan")
                state, gap_start = _STEPS, after
            elif name == "guideline":
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        elif state == _PLAN:
            if name == "plan" and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_plan", content_start)
                plans.append(Span(content_start, at, content))
                state, gap_start = _GUIDE, after
            elif name == "guideline" and opening:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        elif state == _STEPS:
            if text[gap_start:at].strip():
                err("text_between_paths", gap_start)
            if name == "step" and opening:
                state, content_start = _STEP, after
            elif name == "takeaway" and opening:
                if len(steps) != len(plans) or _labels(steps) != _labels(plans):
                    err("plan_step_mismatch", block_start, f"{len(plans)} plan(s), {len(steps)} step(s)")
                state, content_start = _TAKEAWAY, after
            elif name == "guideline" and opening:
                err("missing_summary", at)
                state, block_start, plans, steps, gap_start = _GUIDE, at, [], [], after
            else:
                err("stray_tag", at, m.group(0))
        elif state == _STEP:
            if name == "step" and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_path", content_start)
                steps.append(Span(content_start, at, content))
                state, gap_start = _STEPS, after
            elif name == "guideline" and opening:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))
        else:  # _TAKEAWAY
            if name == "takeaway" and closing:
                content = text[content_start:at]
                if not content.strip():
                    err("empty_summary", content_start)
                blocks.append(Block(block_start, after, tuple(steps), Span(content_start, at, content), tuple(plans)))
                state = _OUT
            elif name == "guideline" and opening:
                err("nested_block", at)
            else:
                err("stray_tag", at, m.group(0))

    if state == _STEPS:
        err("missing_summary", len(text))
    elif state != _OUT:
        open_tag = {_GUIDE: "<guideline>", _PLAN: "<plan>", _STEP: "<step>", _TAKEAWAY: "<takeaway>"}[state]
        err("unclosed_tag", len(text), open_tag)
    return Trace(text, GRAMMAR, tuple(blocks), tuple(errors))

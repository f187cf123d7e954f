"""The budget rule of one sequential stream (causal mode): which tags are open, what closing them costs, which openers
no longer fit. One rule for both rollout backends: the native engine (``engine.core``) and vLLM's logits processor
(``parathink.vllm_rollout.worker``), which loads this file by its path in vLLM's own venv.

So it imports nothing but the standard library: the tag ids (``tags``: ``formats.layouts.TagIds``) and the grammar's
closers (``g``: ``engine.grammar.ForkGrammar``) are read by attribute only, and the worker hands it plain objects
with the same attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Below this many tokens of budget the stream may no longer open what it cannot close (engine.core).
BAN_BELOW = 4


@dataclass
class StreamTags:
    """Open tags of one sequential stream, so the engine can close them when the budget runs out (causal mode,
    where the model writes blocks itself in one stream)."""

    tags: Any
    path_close: int | None = None  # closer of the open path
    in_block: bool = False
    in_summary: bool = False

    def see(self, token: int, g: Any) -> None:
        t = self.tags
        if token in t.block_open:
            self.in_block = True
        elif token in t.path_open and (self.in_block or not t.block_open):
            self.in_block = True
            i = next((j for j, p in enumerate(g.path_open) if p[0] == token), 0)
            self.path_close = g.path_close[i]
        elif token in t.path_close:
            self.path_close = None
        elif token in t.block_close and self.in_block:
            self.in_block = False
        if token in t.summary_open:
            self.in_summary = True
        elif token in t.summary_close:
            self.in_summary = False

    def closers(self, g: Any) -> list[int]:
        out = [] if self.path_close is None else [self.path_close]
        if self.in_block:
            out += list(g.block_closers)
        if self.in_block or self.in_summary:
            out.append(g.summary_close)
        return out

    def extra_need(self, token: int, g: Any) -> int:
        """How many more closers the stream would owe after ``token``."""
        probe = StreamTags(self.tags, self.path_close, self.in_block, self.in_summary)
        probe.see(token, g)
        return len(probe.closers(g)) - len(self.closers(g))

    def bans(self, g: Any, left: int) -> list[int]:
        """Openers the stream may not sample with ``left`` tokens of budget to spare: those whose closers no
        longer fit."""
        if left >= BAN_BELOW:
            return []
        return [t for t in (*self.tags.block_open, *self.tags.path_open, *g.summary_open)
                if self.extra_need(t, g) > left]


class StreamBudget:
    """The budget rule of one causal stream, token by token, for a sampler that asks before each token (vLLM's
    logits processor) or replays a finished response (the loss mask of one): the same decisions as the native
    engine's ``_Run`` for a causal row (``_left``, ``_main_bans``, ``_cut``).

    Before the token at ``used`` (tokens written so far), ``step`` says what may be sampled: ``(forced, bans)``,
    ``forced`` the one token the stream must write (a closer, after the budget ran out) or None; ``DONE`` when the
    stream has closed what was open and must end. Then ``see`` the token that was written.
    """

    DONE = -1

    def __init__(self, tags: Any, g: Any, max_new_tokens: int):
        self.stream, self.g, self.max_new = StreamTags(tags), g, max_new_tokens
        self.forced: list[int] | None = None  # the closers owed since the cut, in order
        self.cut_at: int | None = None  # ``used`` when the budget ran out

    def step(self, used: int) -> tuple[int | None, list[int]]:
        if self.forced is None:
            left = self.max_new - used - len(self.stream.closers(self.g)) - 1
            if left >= 0:
                return None, self.stream.bans(self.g, left)
            self.forced, self.cut_at = self.stream.closers(self.g), used
        k = used - self.cut_at
        return (self.forced[k] if k < len(self.forced) else self.DONE), []

    def see(self, token: int) -> None:
        self.stream.see(token, self.g)

"""The parse result shared by every grammar."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Span:
    """A region of the response: ``text == response[start:end]`` (the content, without its tags)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class Block:
    """One parallel block.

    ``start`` is the offset of the tag that opens the block (``<Parallel>``, ``<guideline>``, ``<think1>``),
    ``end`` the offset just after the tag that closes its summary. ``plans`` is filled for NPR only.
    """

    start: int
    end: int
    paths: tuple[Span, ...]
    summary: Span
    plans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class FormatError:
    code: str
    offset: int  # character offset in the response where the problem was seen
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Trace:
    text: str
    grammar: str
    blocks: tuple[Block, ...]
    error_details: tuple[FormatError, ...] = field(default=())

    @property
    def valid(self) -> bool:
        return not self.error_details

    @property
    def errors(self) -> list[str]:
        """Error codes in order of first occurrence, each once."""
        return list(dict.fromkeys(e.code for e in self.error_details))

    @property
    def parallel(self) -> bool:
        """docs/design.md: a trace is parallel when it is valid and has at least one block."""
        return self.valid and len(self.blocks) > 0

"""Tag grammars (parallel_r1, npr, parathinker): parse/validate, metrics and structured-attention layouts.

``parse(text, grammar)`` is the one entry point; each grammar is a module with ``parse(text) -> Trace``.
This package imports no torch at module load: ``layouts`` imports it when first used.
"""

from __future__ import annotations

from types import ModuleType

from parathink.formats import npr, parallel_r1, parathinker
from parathink.formats.tags import GRAMMARS, TAGS, check_grammar
from parathink.formats.trace import Block, FormatError, Span, Trace

_MODULES: dict[str, ModuleType] = {"parallel_r1": parallel_r1, "npr": npr, "parathinker": parathinker}


def get_grammar(grammar: str) -> ModuleType:
    return _MODULES[check_grammar(grammar)]


def parse(text: str, grammar: str = "parallel_r1") -> Trace:
    """Parse a model response under ``grammar``; never raises on any string."""
    return get_grammar(grammar).parse(text)


__all__ = ["GRAMMARS", "TAGS", "Block", "FormatError", "Span", "Trace", "get_grammar", "parse"]

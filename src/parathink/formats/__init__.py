"""Tag grammars (parallel_r1, npr, parathinker): parse/validate, metrics and structured-attention layouts.

``parse(text, grammar)`` is the one entry point; each grammar is a ``Grammar`` in ``formats.grammar``'s registry
(``get_grammar(name)``), whose ``parse(text) -> Trace`` comes from the grammar's module.
This package imports no torch at module load: ``layouts`` imports it when first used.
"""

from __future__ import annotations

from parathink.formats.grammar import GRAMMAR_REGISTRY, GRAMMARS, TAGS, Grammar, get_grammar
from parathink.formats.trace import Block, FormatError, Span, Trace


def parse(text: str, grammar: str = "parallel_r1") -> Trace:
    """Parse a model response under ``grammar``; never raises on any string."""
    return get_grammar(grammar).parse(text)


__all__ = ["GRAMMARS", "GRAMMAR_REGISTRY", "TAGS", "Block", "FormatError", "Grammar", "Span", "Trace", "get_grammar",
           "parse"]

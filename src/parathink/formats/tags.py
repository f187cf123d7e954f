"""The tag vocabulary of each grammar (docs/design.md, Formats), importable from here.

It is defined beside the grammar registry (``formats.grammar``), whose ``Grammar`` entries hold each grammar's tags:
``TAGS`` and ``check_grammar`` read that registry, and ``GRAMMARS`` names its built-in grammars.
"""

from __future__ import annotations

from parathink.formats.grammar import (
    GRAMMARS,
    MAX_PARATHINKER_PATHS,
    NPR,
    PARALLEL_R1,
    PARATHINKER,
    TAGS,
    check_grammar,
)

__all__ = ["GRAMMARS", "MAX_PARATHINKER_PATHS", "NPR", "PARALLEL_R1", "PARATHINKER", "TAGS", "check_grammar"]

"""Each grammar as one object, in one registry (docs/design.md, Formats).

A ``Grammar`` carries everything code outside ``formats`` used to decide by comparing grammar names: its tags,
its parser, where a block forks and which tags the structured engine writes (Parallel-R1 §3, NPR §3,
ParaThinker §3), and the capabilities the stages check. Callers look the grammar up (``get_grammar``) and read
an attribute, so a new grammar is a parser module plus one ``register`` call here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from parathink.formats import npr, parallel_r1, parathinker
from parathink.formats.trace import Trace

# The tag vocabulary of each grammar. These strings become special tokens of the tokenizer (one id each), so the
# layout can be derived from token ids alone and the engine can fork on a single id.
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


def closing(tag: str) -> str:
    """``<x>`` -> ``</x>``."""
    return f"{tag[0]}/{tag[1:]}"


@dataclass(frozen=True)
class Grammar:
    """One trace grammar. Tag fields hold tag strings; ``{i}`` in a path tag stands for the path's number (from 1).

    A block is: ``[plans_open plan… ]fork_after`` (shared prefix), then per path ``path_open path_label text
    path_close``, then the engine's ``block_close`` (if any) and ``summary_open text summary_close``.
    """

    name: str
    title: str  # how messages name it ("a ParaThinker block opens the response")
    tags: tuple[str, ...]  # the vocabulary, in the order it is added to a tokenizer (ids follow this order)
    parse: Callable[[str], Trace]  # never raises; see the parser module
    # The tag after which the engine forks a block. None: the first path's tag opens the block, so a block
    # opens the response and a teacher or replay can only fork at the start (ParaThinker).
    fork_after: str | None
    path_open: str
    path_close: str
    summary_open: str
    summary_close: str
    block_close: str | None = None  # written by the engine after the last path, before the summary
    path_label: str = ""  # text the engine forces after ``path_open`` (NPR's "i:", which ties a step to its plan)
    # NPR: the paths of a block are declared by plans (``plans_open`` <plan>…</plan>… ``fork_after``), so the
    # model, not the engine, chooses how many paths a block has.
    plans_open: str | None = None
    plan: str | None = None
    # The most paths a block can have: numbered path tags exist up to this count. None: unbounded.
    max_paths: int | None = None
    # The scripted teacher writes its traces in this grammar (it knows one layout of a Parallel-R1 block).
    scripted_teacher: bool = False

    def __post_init__(self) -> None:
        if self.numbered_paths and self.max_paths is None:  # the tags of each number must exist
            raise ValueError(f"grammar {self.name!r}: numbered path tags need max_paths")
        if (self.plan is None) != (self.plans_open is None):  # the engine counts plans from their opener
            raise ValueError(f"grammar {self.name!r}: plan and plans_open go together")
        # Every role must name a tag of the vocabulary: the layout and the engine look each one up as a token id.
        roles = [self.fork_after, self.summary_open, self.summary_close, self.block_close, self.plans_open, self.plan]
        roles += [t for i in self.path_numbers() for t in (self.path_open_tag(i), self.path_close_tag(i))]
        unknown = [t for t in roles if t is not None and t not in self.tags]
        if unknown:
            raise ValueError(f"grammar {self.name!r}: {', '.join(unknown)} not among its tags")

    @property
    def forks_at_start(self) -> bool:
        """The engine forks at the start of the response (there is no tag to fork after), so a teacher's or a
        replay's block must open the response too."""
        return self.fork_after is None

    @property
    def numbered_paths(self) -> bool:
        """Path tags carry the path's number, so a path's id is read from its tag and SFT may relabel thoughts
        at random (ParaThinker §3)."""
        return "{i}" in self.path_open

    @property
    def has_plans(self) -> bool:
        """Plans declare a block's paths (NPR): the engine forks one path per plan, so the number of paths is the
        model's choice and worth reporting (the results table's plans per block)."""
        return self.plan is not None

    def path_open_tag(self, i: int) -> str:
        return self.path_open.format(i=i)

    def path_close_tag(self, i: int) -> str:
        return self.path_close.format(i=i)

    def label(self, i: int) -> str:
        return self.path_label.format(i=i)

    def path_numbers(self) -> range:
        """The path numbers with tags of their own: 1..max_paths when tags are numbered, else one tag for all."""
        return range(1, self.max_paths + 1) if self.numbered_paths else range(1, 2)

    @property
    def block_closers(self) -> tuple[str, ...]:
        """What the engine writes after the merge; the first sits at p + longest path + 1 in the layout."""
        return (self.block_close, self.summary_open) if self.block_close else (self.summary_open,)

    @property
    def forced(self) -> tuple[str, ...]:
        """Every tag the structured engine writes itself (``formats.canonical`` strips whitespace before them)."""
        return tuple(self.path_open_tag(i) for i in self.path_numbers()) + self.block_closers


_REGISTRY: dict[str, Grammar] = {}


def register(grammar: Grammar) -> Grammar:
    if grammar.name in _REGISTRY:
        raise ValueError(f"grammar {grammar.name!r} is registered already")
    _REGISTRY[grammar.name] = grammar
    return grammar


def unregister(name: str) -> None:
    """Remove a grammar (tests that register one of their own)."""
    del _REGISTRY[name]


class RegistryView(Mapping[str, object]):
    """name -> one attribute of each registered grammar, read through the registry so that a grammar registered
    later is seen (``TAGS``, ``canonical.FORCED``)."""

    def __init__(self, attribute: str):
        self.attribute = attribute

    def __getitem__(self, name: str):
        return getattr(_REGISTRY[name], self.attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


GRAMMAR_REGISTRY: Mapping[str, Grammar] = MappingProxyType(_REGISTRY)  # read-only, live: name -> Grammar
TAGS: Mapping[str, tuple[str, ...]] = RegistryView("tags")


def check_grammar(grammar: str) -> str:
    if grammar not in _REGISTRY:
        raise ValueError(f"unknown format {grammar!r}; expected one of {', '.join(_REGISTRY)}")
    return grammar


def get_grammar(grammar: str) -> Grammar:
    return _REGISTRY[check_grammar(grammar)]


register(Grammar(
    "parallel_r1", "Parallel-R1", PARALLEL_R1, parallel_r1.parse, fork_after="<Parallel>", path_open="<Path>",
    path_close="</Path>", summary_open="<Summary>", summary_close="</Summary>", block_close="</Parallel>",
    scripted_teacher=True))
register(Grammar(
    "npr", "NPR", NPR, npr.parse, fork_after="</guideline>", path_open="<step>", path_close="</step>",
    summary_open="<takeaway>", summary_close="</takeaway>", path_label="{i}:", plans_open="<guideline>",
    plan="<plan>"))
register(Grammar(
    "parathinker", "ParaThinker", PARATHINKER, parathinker.parse, fork_after=None, path_open="<think{i}>",
    path_close="</think{i}>", summary_open="<summary>", summary_close="</summary>",
    max_paths=MAX_PARATHINKER_PATHS))

# The built-in grammars' names: config choices and the CLI's --format (fixed when the config schema is built).
GRAMMARS = tuple(_REGISTRY)

"""What the engine forces and where it forks, per grammar (docs/design.md, Formats; docs/reference.md, NPR/ParaThinker).

The layout (``parathink.formats.layouts.scan``) decides positions and visibility from the token ids; this
module only says which ids the engine writes itself:

- parallel_r1: fork after the model's ``<Parallel>``; path i starts with a forced ``<Path>`` and ends at the
  model's ``</Path>``; after the merge the engine writes ``</Parallel>`` and ``<Summary>``.
- npr: fork after ``</guideline>`` with as many paths as ``<plan>`` items since ``<guideline>``; path i starts
  with ``<step>i:``; after the merge the engine writes ``<takeaway>``.
- parathinker: fork at the start of the response; path i is ``<think{i}>…</think{i}>``; then ``<summary>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from parathink.formats.grammar import get_grammar
from parathink.formats.layouts import TagIds


@dataclass(frozen=True)
class ForkGrammar:
    tags: TagIds
    opener: int | None  # the token after which a block forks; None: the block opens the response
    path_open: tuple[tuple[int, ...], ...]  # forced tokens that start path i
    path_close: tuple[int, ...]  # the token that ends path i
    block_closers: tuple[int, ...]  # forced after the merge; the first sits at p + longest path + 1
    summary_open: frozenset[int]
    summary_close: int  # written by the engine when the budget ends inside a summary
    plan: int | None = None  # npr: the paths of a block are its plans
    guideline: int | None = None

    @property
    def max_paths(self) -> int:
        return len(self.path_open)

    def fork_cost(self, k: int) -> int:
        """Fewest tokens a k-path block still needs after its opener: each path its opening tokens, one token
        of text and its closer, then the block closers and the summary's closer."""
        return sum(len(p) for p in self.path_open[:k]) + 2 * k + len(self.block_closers) + 1


def fork_grammar(tags: TagIds, tokenizer, max_paths: int) -> ForkGrammar:
    """The grammar's fork rules (``formats.grammar.Grammar``) as token ids, for blocks of up to ``max_paths``."""
    g, ids = get_grammar(tags.grammar), tags.ids

    def path_open(i: int) -> tuple[int, ...]:  # the tag, then NPR's "i:" as the tokenizer writes it
        label = tokenizer.encode(g.label(i), add_special_tokens=False) if g.path_label else []
        return (ids[g.path_open_tag(i)], *label)

    numbers = range(1, max_paths + 1)
    return ForkGrammar(tags, None if g.forks_at_start else ids[g.fork_after], tuple(map(path_open, numbers)),
                       tuple(ids[g.path_close_tag(i)] for i in numbers), tuple(ids[t] for t in g.block_closers),
                       frozenset({ids[g.summary_open]}), ids[g.summary_close],
                       plan=ids[g.plan] if g.has_plans else None,
                       guideline=ids[g.plans_open] if g.has_plans else None)


def stream_rule(tokenizer, grammar: str, num_paths: int,
                mode: str = "causal") -> tuple[TagIds | None, ForkGrammar | None]:
    """(tag ids, fork rules) a sampler of ``grammar`` applies; (None, None) for causal sampling of a model whose
    tokenizer lacks the grammar's tags (nothing to fork or close). A structured sampler needs the tags."""
    try:
        tags = TagIds.from_tokenizer(tokenizer, grammar)
    except ValueError:
        if mode == "structured":
            raise
        return None, None
    return tags, fork_grammar(tags, tokenizer, num_paths)


def eos_ids(tokenizer, generation_eos) -> list[int]:
    """The ids that end a response: the tokenizer's EOS and the generation config's (one id or a list)."""
    eos = {tokenizer.eos_token_id}
    eos |= set(generation_eos) if isinstance(generation_eos, (list, tuple)) else {generation_eos}
    return sorted(e for e in eos if e is not None)

"""Structured-attention layouts derived from token ids (docs/design.md, Layouts).

For the structured (Unseen) variant of Parallel-R1, NPR and ParaThinker, the sequence is one flat list of
tokens but the paths of a block are computed as if they ran side by side:

- mask: causal, except that tokens of two different paths of one block never see each other; whatever
  follows the block (its closer, the summary, later text) sees every path.
- positions: every path of a block starts at p+1, where p is the position of the last token before the
  block's first path; the token that closes the block (``</Parallel>``, NPR's ``<takeaway>``, ParaThinker's
  ``<summary>``) gets p + (longest path) + 1 and counting continues from there. Tokens between one path's
  closing tag and the next path's opening tag (whitespace) belong to the path before them: they take its next
  positions and are hidden from the other paths.
- path ids: 0 outside paths, i+1 inside path i (ParaThinker's per-path vector is indexed by these); a ParaThinker
  thought takes its tag's label instead (``<think5>`` -> 5), which is i+1 as the engine writes thoughts, and what
  SFT's random relabelling of thoughts trains (ParaThinker §3).
- region: 0 prefix/other, 1 path, 2 summary.

The training forward and the rollout engine both call ``build_layout`` so that what is sampled and what is
trained agree token for token. Malformed sequences (a truncated rollout, garbage tags inside a path) never
raise: the scan just carries on, and since both sides use the same function they still agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parathink.formats.grammar import get_grammar

if TYPE_CHECKING:  # torch is imported lazily: formats must stay light at import time
    import torch

REGION_OTHER, REGION_PATH, REGION_SUMMARY = 0, 1, 2


@dataclass(frozen=True)
class TagIds:
    """Token ids of a grammar's tags, grouped by the role they play in the layout."""

    grammar: str
    ids: Mapping[str, int]  # tag string -> token id
    block_open: frozenset[int]  # announces a block; empty for ParaThinker (the first thought opens it)
    path_open: frozenset[int]
    path_close: frozenset[int]
    block_close: frozenset[int]  # positioned at p + longest path + 1
    summary_open: frozenset[int]
    summary_close: frozenset[int]
    path_label: Mapping[int, int] = field(default_factory=dict)  # ParaThinker: <thinkN> id -> N, the path id

    @classmethod
    def from_mapping(cls, grammar: str, ids: Mapping[str, int]) -> TagIds:
        g = get_grammar(grammar)
        missing = [t for t in g.tags if t not in ids]
        if missing:
            raise ValueError(f"tag ids for {grammar!r} lack {', '.join(missing)}")

        def of(*tags: str | None) -> frozenset[int]:
            return frozenset(ids[t] for t in tags if t is not None)

        # NPR forks at </guideline>: the plans are shared prefix, the steps are the paths; its block closer is
        # the takeaway, which also opens the summary.
        numbers = g.path_numbers()
        return cls(grammar=grammar, ids=dict(ids), block_open=of(g.fork_after),
                   path_open=of(*(g.path_open_tag(i) for i in numbers)),
                   path_close=of(*(g.path_close_tag(i) for i in numbers)), block_close=of(g.block_closers[0]),
                   summary_open=of(g.summary_open), summary_close=of(g.summary_close),
                   path_label={ids[g.path_open_tag(i)]: i for i in numbers} if g.numbered_paths else {})

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, grammar: str) -> TagIds:
        """Look each tag up as ONE token; a tag the tokenizer splits or does not know is an error."""
        unk = getattr(tokenizer, "unk_token_id", None)
        ids: dict[str, int] = {}
        for tag in get_grammar(grammar).tags:
            tid = tokenizer.convert_tokens_to_ids(tag)
            if tid is None or (unk is not None and tid == unk):
                raise ValueError(f"tokenizer has no single token for tag {tag!r} (format {grammar}); "
                                 "add the tags as special tokens first")
            ids[tag] = int(tid)
        return cls.from_mapping(grammar, ids)


@dataclass(frozen=True)
class Layout:
    attention_mask: torch.Tensor  # [L, L] bool, True = query row may attend to key column
    position_ids: torch.Tensor  # [L] long
    path_ids: torch.Tensor  # [L] long, 0 outside paths, i+1 in path i
    region: torch.Tensor  # [L] long, REGION_*


@dataclass(frozen=True)
class BatchLayout:
    attention_mask: torch.Tensor  # [B, L, L] bool
    position_ids: torch.Tensor  # [B, L] long
    path_ids: torch.Tensor  # [B, L] long
    region: torch.Tensor  # [B, L] long
    padding: torch.Tensor  # [B, L] bool, True on right padding


_OUT, _PENDING, _PATH, _BETWEEN = range(4)


def scan(token_ids: Sequence[int], tags: TagIds) -> tuple[list[int], ...]:
    """Positions, path ids, block ids (-1 outside paths), regions and each path token's index within its block (the
    mask's notion of "another path": two thoughts with one label stay apart) of every token; pure Python."""
    n = len(token_ids)
    pos, pid, blk, region, order = [0] * n, [0] * n, [-1] * n, [0] * n, [0] * n
    next_pos = 0
    state = _OUT
    block = -1
    p = 0  # position of the last token before the block's first path
    lengths: list[int] = []  # tokens assigned to each path of the current block
    labels: list[int] = []  # the path id of each path of the current block
    in_summary = False

    for i, t in enumerate(token_ids):
        if state == _PATH or (state == _BETWEEN and t not in tags.path_open and t not in tags.block_close):
            # A token of the current path (or whitespace after it, which stays with it).
            k = len(lengths) - 1
            pos[i] = p + 1 + lengths[k]
            lengths[k] += 1
            pid[i], blk[i], region[i], order[i] = labels[k], block, REGION_PATH, k + 1
            if state == _PATH and t in tags.path_close:
                state = _BETWEEN
            continue
        if t in tags.path_open and (state in (_PENDING, _BETWEEN) or (state == _OUT and not tags.block_open)):
            if state == _OUT:  # ParaThinker: the first thought opens the block
                block += 1
                lengths, labels = [], []
            if not lengths:
                p = next_pos - 1
            lengths.append(1)
            labels.append(tags.path_label.get(t, len(lengths)))
            pos[i], pid[i], blk[i], region[i], order[i] = p + 1, labels[-1], block, REGION_PATH, len(lengths)
            state, in_summary = _PATH, False
            continue
        if state == _BETWEEN:  # t closes the block
            pos[i] = p + max(lengths) + 1
            next_pos = pos[i] + 1
            state = _OUT
            if t in tags.summary_open:
                in_summary = True
            region[i] = REGION_SUMMARY if in_summary else REGION_OTHER
            continue
        # Plain sequential token (prefix, text outside blocks, the summary).
        pos[i] = next_pos
        next_pos += 1
        if t in tags.summary_open:
            in_summary = True
        region[i] = REGION_SUMMARY if in_summary else REGION_OTHER
        if t in tags.summary_close:
            in_summary = False
        if state == _OUT and t in tags.block_open:
            block += 1
            lengths, labels = [], []
            state = _PENDING
    return pos, pid, blk, region, order


def _mask(order: torch.Tensor, blk: torch.Tensor) -> torch.Tensor:
    import torch

    n = order.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril_()
    in_path = order > 0
    both = in_path[:, None] & in_path[None, :]
    other_path_same_block = both & (blk[:, None] == blk[None, :]) & (order[:, None] != order[None, :])
    return causal & ~other_path_same_block


def build_layout(token_ids: Sequence[int] | torch.Tensor, tags: TagIds, grammar: str | None = None) -> Layout:
    """The layout of one sequence (prompt + response) of ``len(token_ids)`` tokens."""
    import torch

    if grammar is not None and grammar != tags.grammar:
        raise ValueError(f"tag ids are for {tags.grammar!r}, layout asked for {grammar!r}")
    ids = token_ids.tolist() if hasattr(token_ids, "tolist") else list(token_ids)
    pos, pid, blk, region, order = scan(ids, tags)
    return Layout(
        attention_mask=_mask(torch.tensor(order, dtype=torch.long), torch.tensor(blk, dtype=torch.long)),
        position_ids=torch.tensor(pos, dtype=torch.long),
        path_ids=torch.tensor(pid, dtype=torch.long),
        region=torch.tensor(region, dtype=torch.long),
    )


def causal_layout(length: int) -> Layout:
    """The plain causal layout (Seen variant), in the same shape as ``build_layout``."""
    import torch

    return Layout(
        attention_mask=torch.ones(length, length, dtype=torch.bool).tril_(),
        position_ids=torch.arange(length),
        path_ids=torch.zeros(length, dtype=torch.long),
        region=torch.zeros(length, dtype=torch.long),
    )


def build_batch_layout(
    seqs: Sequence[Sequence[int]], tags: TagIds | None, grammar: str | None = None, pad_to: int | None = None
) -> BatchLayout:
    """Layouts of a batch, right-padded to the longest sequence (or ``pad_to``).

    ``tags=None`` gives causal layouts. Padding rows attend only to themselves, so no softmax row is empty.
    """
    import torch

    length = max([len(s) for s in seqs] + [pad_to or 0])
    b = len(seqs)
    mask = torch.zeros(b, length, length, dtype=torch.bool)
    mask[:, torch.arange(length), torch.arange(length)] = True
    positions = torch.zeros(b, length, dtype=torch.long)
    path_ids = torch.zeros(b, length, dtype=torch.long)
    region = torch.zeros(b, length, dtype=torch.long)
    padding = torch.ones(b, length, dtype=torch.bool)
    for row, seq in enumerate(seqs):
        n = len(seq)
        lay = causal_layout(n) if tags is None else build_layout(seq, tags, grammar)
        mask[row, :n, :n] = lay.attention_mask
        positions[row, :n] = lay.position_ids
        path_ids[row, :n] = lay.path_ids
        region[row, :n] = lay.region
        padding[row, :n] = False
    return BatchLayout(mask, positions, path_ids, region, padding)

"""A KV cache of fixed-size blocks within a byte budget: rows hold blocks as they grow and give them back.

The pool is ``kv`` [layers, 2 * kv_heads, blocks * BLOCK_TOKENS, head_dim] (keys in the first half of dim 1), a
flat run of slots; block b holds slots [b * BLOCK_TOKENS, (b + 1) * BLOCK_TOKENS). Row r's entry e lives in slot
``blocks[r][e // BLOCK_TOKENS] * BLOCK_TOKENS + e % BLOCK_TOKENS``: entries stay compacted from 0, as in
``RowCache``, so the runners' masks (``lens``) and the engine's forks, parks and merges read the same. What
changes is where an entry lies, so a step gathers each layer's rows' blocks whole (one ``index_select`` of
[BLOCK_TOKENS, D] tiles per kv head, viewed as [B, 2H, S, D]; one layer at a time: the workspace is 1/layers of the
live window, padded to the longest row's blocks) instead of viewing a slice. The step reads the block table from one
device buffer (``device_table``), so a static step replays as a CUDA graph like the contiguous one (``decode``).

Block 0 is a sink: prefill padding writes land there and gather padding reads it, so neither needs a block of its
own. The pool is zeroed at allocation and only ever written with finite values, so every slot a masked read
touches is finite (a NaN under the mask would still poison attention: see ``cache``).

Forks share blocks (issue 49 item 3): a row forked from another references the source's full blocks (each block
has a reference count on the host: ``refs``) and gets a copy of only its partly filled last block, the one block it
would write first (copy on write, done at the fork). A row writes only entries past its ``lens``, which lie in
that private last block or in fresh ones, so a shared block is never written; ``expose`` checks it every step.
Freeing a row decrements its blocks' counts, and a block goes back to the pool with its last reference. A 4-path
block so holds its prefix once plus the paths (``peak`` counts blocks, not references).

A row's block list is on the host, mirrored in ``table`` (host, one row per cache row; entries past a row's
blocks are stale or the sink, read only under the mask), which each step uploads once. The engine reserves room
before a step (``free``); ``_alloc`` running dry is an engine bug.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parathink.engine.cache import Bounds
from parathink.engine.kv_budget import BLOCK_TOKENS, blocks_for
from parathink.engine.transfer import upload

SINK = 0


@dataclass(eq=False)
class Parked:
    """Entries [start, start + n) of a block chain: a parked path's own entries, after the shared prefix."""

    blocks: list[int]
    start: int
    n: int


class PagedCache(Bounds):
    """The ``RowCache`` interface over a pool of ``blocks`` blocks (one of them the sink); ``rows`` cache rows."""

    def __init__(self, layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device, blocks: int):
        if blocks < 2:
            raise ValueError(f"paged cache: {blocks} blocks, at least 2 needed (one is the sink)")
        self.kv = torch.zeros((layers, 2 * kv_heads, blocks * BLOCK_TOKENS, head_dim), dtype=dtype, device=device)
        self.kv_heads, self.max_len = kv_heads, max_len
        self.lens = [0] * rows
        self.blocks: list[list[int]] = [[] for _ in range(rows)]
        self.table = torch.full((rows, blocks_for(max_len)), SINK, dtype=torch.long)
        self.free = list(range(blocks - 1, SINK, -1))  # a stack: the lowest block numbers go first
        self.refs = [0] * blocks  # rows and parked paths that reference each block
        self.usable = blocks - 1
        self.peak = 0  # most blocks held at once
        # The host ``table``'s rows a step reads (``expose``): one buffer for the call, as a CUDA graph reads it.
        self.device_table = torch.zeros(self.table.shape, dtype=torch.long, device=device)
        self.step_blocks = 0  # its columns this step
        self.prefill_slots: torch.Tensor | None = None  # [B, T] (``begin_prefill``)

    @property
    def capacity(self) -> int:
        return len(self.lens)

    @property
    def used(self) -> int:
        return self.usable - len(self.free)

    # ----------------------------------------------------------------------------------------- blocks

    def _alloc(self) -> int:
        if not self.free:
            raise RuntimeError("engine cache: no free block (engine bug: the room for this step was not reserved)")
        b = self.free.pop()
        self.refs[b] = 1
        self.peak = max(self.peak, self.usable - len(self.free))
        return b

    def _grow(self, row: int, n: int) -> None:
        """Row ``row`` gets blocks for ``n`` entries."""
        self.check_len(n)
        own = self.blocks[row]
        while len(own) * BLOCK_TOKENS < n:
            b = self._alloc()
            self.table[row, len(own)] = b
            own.append(b)

    def _release(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a block nobody references goes back to the pool."""
        refs = self.refs
        for b in reversed(blocks):
            refs[b] -= 1
            if refs[b] == 0:
                self.free.append(b)
            elif refs[b] < 0:
                raise RuntimeError(f"engine cache: block {b} released more often than referenced (engine bug)")

    def _share(self, row: int, blocks: list[int]) -> None:
        """Row ``row`` (holding no blocks) references ``blocks`` (full blocks of another row) as its first ones."""
        if self.blocks[row]:
            raise RuntimeError("engine cache: blocks shared into a row that holds some (engine bug)")
        for b in blocks:
            self.refs[b] += 1
        self.blocks[row] = list(blocks)
        self.table[row, :len(blocks)] = torch.tensor(blocks, dtype=torch.long)

    def _own_tail(self, row: int, n: int) -> None:
        """Copy on write: the block holding the row's entry ``n`` (about to be written) becomes the row's own."""
        own, i = self.blocks[row], n // BLOCK_TOKENS
        if i < len(own) and self.refs[own[i]] > 1:
            b = self._alloc()
            pool = self.kv.unflatten(2, (-1, BLOCK_TOKENS))
            pool[:, :, b] = pool[:, :, own[i]]
            self._release([own[i]])
            own[i] = b
            self.table[row, i] = b

    @property
    def references(self) -> int:
        """Block references held by rows and parked paths (>= ``used``: the difference is what sharing saves)."""
        return sum(self.refs)

    def free_rows(self, rows: list[int]) -> None:
        """Rows leave the cache: their blocks go back to the pool."""
        for r in rows:
            self._release(self.blocks[r])
            self.blocks[r], self.lens[r] = [], 0

    def truncate(self, row: int, n: int) -> None:
        """Keep the row's first n entries; the blocks past them go back (a kept block the row would write next and
        shares is copied first)."""
        keep = blocks_for(n)
        self._release(self.blocks[row][keep:])
        del self.blocks[row][keep:]
        self.lens[row] = n
        self._own_tail(row, n)

    def _slot_list(self, blocks: list[int], start: int, end: int) -> list[int]:
        return [blocks[e // BLOCK_TOKENS] * BLOCK_TOKENS + e % BLOCK_TOKENS for e in range(start, end)]

    def _upload(self, values) -> torch.Tensor:
        return upload(values, torch.long, self.kv.device)

    # ----------------------------------------------------------------------------------------- before a read

    def expose(self, n: int, s: int, b: int | None = None) -> None:
        """Rows [0, n) each write entry ``lens[r]`` and read slots [0, s): give a block to each row whose blocks are
        full, and upload the block table of the step's rows. A static step runs ``b`` >= n rows: its padding rows
        [n, b) are dead cache rows that write their entry 0, so their tables point at the sink."""
        refs, blocks, lens = self.refs, self.blocks, self.lens
        for r in range(n):
            own, e = blocks[r], lens[r]
            if e >= len(own) * BLOCK_TOKENS:
                self._grow(r, e + 1)
            elif refs[own[e // BLOCK_TOKENS]] > 1:
                raise RuntimeError(f"engine cache: row {r} would write into shared block {own[e // BLOCK_TOKENS]} "
                                   "(engine bug: a fork's partly filled block is copied when it forks)")
        b = n if b is None else b
        if b > n:
            self.table[n:b] = SINK
        nb = blocks_for(s)
        host = self.table[:b, :nb]
        if self.kv.device.type == "cuda":
            host = torch.empty(host.shape, dtype=host.dtype, pin_memory=True).copy_(host)
        self.device_table[:b, :nb].copy_(host, non_blocking=True)
        self.step_blocks = nb

    def begin_prefill(self, row0: int, lens: list[int], t: int) -> None:
        """Rows row0.. are about to be prefilled over t slots, holding ``lens`` entries: give them blocks; their
        padding writes go to the sink."""
        slots = []
        for j, n in enumerate(lens):
            self._grow(row0 + j, n)
            slots.append(self._slot_list(self.blocks[row0 + j], 0, n) + [SINK * BLOCK_TOKENS] * (t - n))
        self.prefill_slots = self._upload(slots)

    # ----------------------------------------------------------------------------------------- device views

    def layer(self, layer: int, row0: int, b: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, S, D] of rows row0.. up to length ``s``: their blocks, gathered whole (one
        ``index_select`` of [BLOCK_TOKENS, D] tiles per kv head) and viewed, not copied again, as rows."""
        nb, h2, d = self.step_blocks, self.kv.shape[1], self.kv.shape[-1]
        pool = self.kv[layer].view(h2, -1, BLOCK_TOKENS, d)  # [2H, blocks, BLOCK, D]
        index = self.device_table[row0:row0 + b, :nb].flatten()
        kv = pool.index_select(1, index).view(h2, b, nb * BLOCK_TOKENS, d).transpose(0, 1)[:, :, :s]
        return kv[:, :self.kv_heads], kv[:, self.kv_heads:]

    def step_index(self, lens: torch.Tensor) -> torch.Tensor:
        """Slots [B] of rows 0..B-1's next entries (``lens`` [B], on the device)."""
        rows = torch.arange(lens.shape[0], device=lens.device)
        return self.device_table[rows, lens // BLOCK_TOKENS] * BLOCK_TOKENS + lens % BLOCK_TOKENS

    def write_step(self, layer: int, index: torch.Tensor, kv: torch.Tensor) -> None:
        """Decode: store kv [B, 2H, D] (one new token per row) at the slots ``step_index`` gave."""
        self.kv[layer].index_copy_(1, index, kv.transpose(0, 1))

    def write_prefill(self, layer: int, row0: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [B, H, T, D] of the rows ``begin_prefill`` prepared."""
        kv = torch.cat([k, v], 1).permute(1, 0, 2, 3).flatten(1, 2)  # [2H, B * T, D]
        self.kv[layer].index_copy_(1, self.prefill_slots.flatten(), kv)

    # ----------------------------------------------------------------------------------------- bookkeeping

    def prefilled(self, row0: int, lens: list[int], t: int) -> None:
        for j, n in enumerate(lens):
            self.lens[row0 + j] = n

    def advance(self, n: int) -> None:
        lens = self.lens
        for r in range(n):
            lens[r] += 1

    # ----------------------------------------------------------------------------------------- fork, park, merge

    def _copy(self, src: list[int], dst: list[int]) -> None:
        if src:
            self.kv[:, :, self._upload(dst)] = self.kv[:, :, self._upload(src)]

    def copy_rows(self, src: list[int], dst: list[int]) -> None:
        """Rows ``dst`` (empty) become copies of rows ``src``: they share the source's full blocks and get a copy
        of its partly filled last one (one copy for all)."""
        pool = self.kv.unflatten(2, (-1, BLOCK_TOKENS))  # [layers, 2H, blocks, BLOCK, D], a view
        from_blocks, to_blocks = [], []
        for s, d in zip(src, dst):
            n = self.lens[s]
            full = n // BLOCK_TOKENS
            self._share(d, self.blocks[s][:full])
            self._grow(d, n)
            from_blocks += self.blocks[s][full:blocks_for(n)]
            to_blocks += self.blocks[d][full:]
            self.lens[d] = n
        if from_blocks:
            pool[:, :, self._upload(to_blocks)] = pool[:, :, self._upload(from_blocks)]

    def copy_spans(self, src: int, spans: list[tuple[int, int]], dst: int) -> None:
        """Row ``dst`` (empty) gets row ``src``'s entries [a, b) of each span, one after another; the full blocks
        of a first span that starts at entry 0 (a recomputed fork's prefix) are shared, the rest copied."""
        n = sum(b - a for a, b in spans)
        full = spans[0][1] // BLOCK_TOKENS if spans and spans[0][0] == 0 else 0
        self._share(dst, self.blocks[src][:full])
        self._grow(dst, n)
        skip = full * BLOCK_TOKENS
        from_slots = [x for a, b in spans for x in self._slot_list(self.blocks[src], a, b)][skip:]
        self._copy(from_slots, self._slot_list(self.blocks[dst], skip, n))
        self.lens[dst] = n

    def move_row(self, src: int, dst: int) -> None:
        """Row ``src``'s blocks become row ``dst``'s (``dst`` was freed): no entry moves."""
        self.blocks[dst], self.blocks[src] = self.blocks[src], []
        self.lens[dst], self.lens[src] = self.lens[src], 0
        self.table[dst] = self.table[src]

    def take(self, row: int, start: int) -> Parked:
        """Park: the row's entries from ``start`` on keep their blocks (the ones wholly before ``start`` go back);
        the row is left empty."""
        first = start // BLOCK_TOKENS
        self._release(self.blocks[row][:first])
        parked = Parked(self.blocks[row][first:], start - first * BLOCK_TOKENS, self.lens[row] - start)
        self.blocks[row], self.lens[row] = [], 0
        return parked

    def extract(self, row: int, start: int, end: int) -> Parked:
        """A parked copy of the row's entries [start, end), in blocks of its own."""
        parked = Parked([self._alloc() for _ in range(blocks_for(end - start))], 0, end - start)
        self._copy(self._slot_list(self.blocks[row], start, end), self._slot_list(parked.blocks, 0, parked.n))
        return parked

    def append(self, row: int, parked: Parked) -> None:
        """Merge: add parked entries after the row's own; the parked blocks go back. Where both ends sit on a block
        boundary the parked blocks are appended to the row's block table as they are (nothing is copied)."""
        start = self.lens[row]
        self.check_len(start + parked.n)
        if start % BLOCK_TOKENS == 0 and parked.start == 0 and len(self.blocks[row]) * BLOCK_TOKENS == start:
            own = self.blocks[row]
            self.table[row, len(own):len(own) + len(parked.blocks)] = torch.tensor(parked.blocks, dtype=torch.long)
            own += parked.blocks
            parked.blocks = []  # its references are the row's now
            self.lens[row] = start + parked.n
            return
        self._own_tail(row, start)
        # Block by block, each parked block released as soon as it is copied: the merge holds at most one block
        # more than the row and the paths did (one copy of a whole path first would hold it twice).
        at, end = parked.start, parked.start + parked.n
        while at < end:
            upto = min(end, (at // BLOCK_TOKENS + 1) * BLOCK_TOKENS)
            n = self.lens[row] + upto - at
            self._grow(row, n)
            self._copy(self._slot_list(parked.blocks, at, upto), self._slot_list(self.blocks[row], self.lens[row], n))
            self.lens[row] = n
            self._release([parked.blocks[at // BLOCK_TOKENS]])
            parked.blocks[at // BLOCK_TOKENS] = SINK  # released: not twice
            at = upto
        self._release([b for b in parked.blocks if b != SINK])  # an empty path's block, if any
        parked.blocks = []

    def drop(self, parked: Parked) -> None:
        self._release(parked.blocks)
        parked.blocks = []

"""A preallocated key/value cache whose rows can be forked, parked and merged.

Each row holds the keys and values of one decoding stream, compacted from slot 0 (``lens[r]`` valid entries).
A new token attends to *every* valid entry of its row, so the structured layout is carried by which entries
a row holds, not by a mask: a forked path row holds prefix + its own path; the merged row holds prefix + all
paths (each path's keys were computed at that path's own positions, exactly the layout's). Attention is
invariant to the order of the keys, so a merged row may hold the paths in any order.

Active rows are kept contiguous in slots [0, n): a finished row is swapped with the last one, so every
decoding step works on views, never on a gathered copy of the cache.

The cache is allocated once, for every row a ``generate`` call can hold and the longest sequence it can reach,
and left uninitialised: growing it would zero and copy every row slot, and forks, merges and moves copy only a
row's valid entries. A batched step reads each row up to the longest row's length, masked past its own entries;
the mask adds -inf to the score, but a NaN or Inf key or value there still makes the output NaN (0 * NaN). So
each row also tracks how many leading slots are known to hold finite values (``fin``: written, copied or
zeroed), and ``expose`` zeroes a slot once, before the first step that reads it. Nothing else is zeroed.

``lens`` and ``fin`` live on the host: the engine knows them, and reading them from a GPU would stop the host
until the device catches up.
"""

from __future__ import annotations

import torch

from parathink.engine.transfer import upload

# Slots ``expose`` zeroes at least, per row and call: a row that lags the longest one is zeroed in chunks,
# not one slot per step.
ZERO_CHUNK = 64


class Bounds:
    """The two checks every cache layout makes (its ``capacity`` rows, ``max_len`` entries a row)."""

    capacity: int
    max_len: int

    def check_rows(self, rows: int) -> None:
        if rows > self.capacity:
            raise RuntimeError(f"engine cache: {rows} rows asked, {self.capacity} allocated (engine bug)")

    def check_len(self, length: int) -> None:
        if length > self.max_len:
            raise RuntimeError(f"engine cache: {length} entries asked, at most {self.max_len} (engine bug)")


class RowCache(Bounds):
    """kv: [layers, rows, 2 * kv_heads, max_len, head_dim] (keys in the first half of dim 2, values in the
    second, so one write stores both); lens, fin: per row, on the host."""

    # What fills the slots at allocation: None leaves the memory as it was (the fast path). The tests fill NaN,
    # so that a read of a slot never written and never exposed shows as NaN log-probs.
    fill: float | None = None

    def __init__(self, layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        self.kv = torch.empty((layers, rows, 2 * kv_heads, max_len, head_dim), dtype=dtype, device=device)
        if self.fill is not None:
            self.kv.fill_(self.fill)
        self.lens = [0] * rows  # valid entries per row
        self.fin = [0] * rows  # leading slots known to hold finite values (>= lens once exposed or written)
        self.kv_heads, self.max_len = kv_heads, max_len

    @property
    def capacity(self) -> int:
        return self.kv.shape[1]

    # ----------------------------------------------------------------------------------------- before a read

    def expose(self, n: int, s: int, b: int | None = None) -> None:
        """Rows [0, n) are about to attend over slots [0, s) (each writes its slot ``lens[r]`` first): zero,
        once, every slot past a row's own entries that holds nothing finite yet. (``b``: the rows a static step
        runs, padding included; their own slots serve them here.)"""
        if min(self.fin[:n]) >= s:  # the common step: every row's chunk reaches past the window
            return
        groups: dict[int, list[int]] = {}
        for r in range(n):
            start = max(self.fin[r], self.lens[r] + 1)
            if start < s:
                groups.setdefault(start, []).append(r)
        for start, rows in groups.items():
            end = min(self.max_len, max(s, start + ZERO_CHUNK))
            self.kv[:, _rows(rows, self.kv.device), :, start:end] = 0
            for r in rows:
                self.fin[r] = end

    # ----------------------------------------------------------------------------------------- device views

    def layer(self, layer: int, row0: int, b: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, S, D] (views) of rows row0.. up to length ``s``."""
        kv = self.kv[layer, row0:row0 + b, :, :s]
        return kv[:, :self.kv_heads], kv[:, self.kv_heads:]

    def step_index(self, lens: torch.Tensor) -> torch.Tensor:
        """Flat indices [B * 2H] of rows 0..B-1's next slots (``lens`` [B], on the device) in one layer's
        ``kv[layer].view(-1, D)`` (one per step, shared by every layer)."""
        h2, s = self.kv.shape[2], self.kv.shape[3]
        rows = torch.arange(lens.shape[0], device=lens.device)
        heads = torch.arange(h2, device=lens.device)
        return ((rows[:, None] * h2 + heads[None]) * s + lens[:, None]).flatten()

    def write_step(self, layer: int, index: torch.Tensor, kv: torch.Tensor) -> None:
        """Decode: store kv [B, 2H, D] (one new token per row) at the slots ``step_index`` gave."""
        self.kv[layer].view(-1, kv.shape[-1]).index_copy_(0, index, kv.reshape(-1, kv.shape[-1]))

    def begin_prefill(self, row0: int, lens: list[int], t: int) -> None:
        """Nothing to prepare: rows row0.. already own slots 0..t-1 (the budgeted ``PagedCache`` gives blocks here)."""

    def write_prefill(self, layer: int, row0: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [B, H, T, D] of fresh right-padded rows row0.. at slots 0..T-1 (``prefilled`` books them)."""
        self.kv[layer, row0:row0 + k.shape[0], :, :k.shape[2]] = torch.cat([k, v], 1)

    # ----------------------------------------------------------------------------------------- bookkeeping

    def prefilled(self, row0: int, lens: list[int], t: int) -> None:
        """Rows row0.. were prefilled over t slots (padding included: finite), holding ``lens`` entries."""
        for j, n in enumerate(lens):
            self.lens[row0 + j], self.fin[row0 + j] = n, t

    def advance(self, n: int) -> None:
        """Rows [0, n) each wrote one entry."""
        lens = self.lens
        for r in range(n):
            lens[r] += 1

    # ----------------------------------------------------------------------------------------- fork, park, merge

    def copy_rows(self, src: list[int], dst: list[int]) -> None:
        """Fork: rows ``dst`` become copies of rows ``src`` (each row's valid entries only; the shared prefix is
        copied, never recomputed). One copy per distinct source length."""
        by_len: dict[int, tuple[list[int], list[int]]] = {}
        for s, d in zip(src, dst):
            pair = by_len.setdefault(self.lens[s], ([], []))
            pair[0].append(s)
            pair[1].append(d)
        device = self.kv.device
        for n, (s, d) in by_len.items():
            self.check_len(n)
            self.kv[:, _rows(d, device), :, :n] = self.kv[:, _rows(s, device), :, :n]
            for r in d:
                self._landed(r, n)

    def move_row(self, src: int, dst: int) -> None:
        n = self.lens[src]
        self.kv[:, dst, :, :n] = self.kv[:, src, :, :n]
        self._landed(dst, n)

    def take(self, row: int, start: int) -> torch.Tensor:
        """Park: a copy of row's entries from ``start`` on, [layers, 2H, n, D]."""
        return self.kv[:, row, :, start:self.lens[row]].clone()

    def append(self, row: int, kv: torch.Tensor) -> None:
        """Merge: add parked entries [layers, 2H, n, D] after row's own."""
        start, n = self.lens[row], kv.shape[2]
        self.check_len(start + n)
        self.kv[:, row, :, start:start + n] = kv
        self.lens[row] = start + n

    def free_rows(self, rows: list[int]) -> None:
        """Rows leave the batch: nothing to give back, every row keeps its slots for the whole call."""

    def drop(self, parked: torch.Tensor) -> None:
        """A parked copy is freed with its last reference."""

    def _landed(self, row: int, n: int) -> None:
        """Row got n valid entries written over its first n slots; its slots past them keep what they held."""
        self.fin[row] = max(self.fin[row], self.lens[row], n)
        self.lens[row] = n


def _rows(rows: list[int], device) -> slice | torch.Tensor:
    """An index of cache rows: a slice when they are consecutive (a view, no gather), else a tensor."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return upload(rows, torch.long, device)


"""A preallocated key/value cache whose rows can be forked, parked and merged.

Each row holds the keys and values of one decoding stream, compacted from slot 0 (``lens[r]`` valid entries).
A new token attends to *every* valid entry of its row, so the structured layout is carried by which entries
a row holds, not by a mask: a forked path row holds prefix + its own path; the merged row holds prefix + all
paths (each path's keys were computed at that path's own positions, exactly the layout's). Attention is
invariant to the order of the keys, so a merged row may hold the paths in any order.

Active rows are kept contiguous in slots [0, n): a finished row is swapped with the last one, so every
decoding step works on views, never on a gathered copy of the cache.
"""

from __future__ import annotations

import torch


class RowCache:
    """k, v: [layers, rows, kv_heads, max_len, head_dim]; lens: [rows] long (valid entries per row)."""

    def __init__(self, layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (layers, rows, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lens = torch.zeros(rows, dtype=torch.long, device=device)
        self.max_len = max_len

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    def reserve(self, rows: int) -> None:
        """Grow to at least ``rows`` slots (doubling, so growth is rare)."""
        if rows <= self.capacity:
            return
        new = max(rows, 2 * self.capacity)
        extra = new - self.capacity
        pad = (self.k.shape[0], extra, *self.k.shape[2:])
        self.k = torch.cat([self.k, self.k.new_zeros(pad)], 1)
        self.v = torch.cat([self.v, self.v.new_zeros(pad)], 1)
        self.lens = torch.cat([self.lens, self.lens.new_zeros(extra)])

    def write(self, layer: int, row0: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, H, T, D] of rows row0.. at each row's next slots; return that layer's rows' keys and
        values up to the longest row (views [B, H, S, D]). ``lens`` moves on in ``advance``."""
        b, _, t, _ = k.shape
        lens = self.lens[row0:row0 + b]
        kc, vc = self.k[layer, row0:row0 + b], self.v[layer, row0:row0 + b]
        if t == 1:
            rows = torch.arange(b, device=k.device)
            kc[rows, :, lens] = k[:, :, 0]
            vc[rows, :, lens] = v[:, :, 0]
        else:  # prefill of fresh rows (lens == 0), right-padded: slots 0..T-1
            kc[:, :, :t] = k
            vc[:, :, :t] = v
        return kc, vc

    def advance(self, row0: int, count: torch.Tensor) -> None:
        """Add ``count`` [B] valid entries to rows row0.."""
        self.lens[row0:row0 + count.shape[0]] += count

    def copy_rows(self, src: list[int], dst: list[int]) -> None:
        """Fork: rows ``dst`` become copies of rows ``src`` (the shared prefix is copied, never recomputed)."""
        s = torch.tensor(src, device=self.k.device)
        d = torch.tensor(dst, device=self.k.device)
        n = int(self.lens[s].max())
        self.k[:, d, :, :n] = self.k[:, s, :, :n]
        self.v[:, d, :, :n] = self.v[:, s, :, :n]
        self.lens[d] = self.lens[s]

    def move_row(self, src: int, dst: int) -> None:
        n = int(self.lens[src])
        self.k[:, dst, :, :n] = self.k[:, src, :, :n]
        self.v[:, dst, :, :n] = self.v[:, src, :, :n]
        self.lens[dst] = self.lens[src]

    def take(self, row: int, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Park: a copy of row's entries from ``start`` on, [layers, H, n, D] each."""
        end = int(self.lens[row])
        return self.k[:, row, :, start:end].clone(), self.v[:, row, :, start:end].clone()

    def append(self, row: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Merge: add parked entries [layers, H, n, D] after row's own."""
        start, n = int(self.lens[row]), k.shape[2]
        self.k[:, row, :, start:start + n] = k
        self.v[:, row, :, start:start + n] = v
        self.lens[row] += n

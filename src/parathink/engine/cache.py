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
    """kv: [layers, rows, 2 * kv_heads, max_len, head_dim] (keys in the first half of dim 2, values in the
    second, so one write stores both); lens: [rows] long (valid entries per row)."""

    def __init__(self, layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device, start_len: int | None = None):
        # Rows start short and grow (doubling) up to max_len: a budget that counts every branch is far longer
        # than what one forked row holds, and a small cache stays in the CPU's caches.
        length = min(max_len, start_len or max_len)
        self.kv = torch.zeros((layers, rows, 2 * kv_heads, length, head_dim), dtype=dtype, device=device)
        self.lens = torch.zeros(rows, dtype=torch.long, device=device)
        self.kv_heads, self.max_len = kv_heads, max_len

    def ensure(self, length: int, active: int | None = None) -> None:
        """Make room for ``length`` entries per row (copying only the first ``active`` rows, the live ones)."""
        have = self.kv.shape[3]
        if length <= have:
            return
        if length > self.max_len:
            raise RuntimeError(f"engine cache: {length} entries asked, at most {self.max_len} (engine bug)")
        grown = self.kv.new_zeros((*self.kv.shape[:3], min(self.max_len, max(length, 2 * have)), self.kv.shape[4]))
        n = self.capacity if active is None else active
        grown[:, :n, :, :have] = self.kv[:, :n]
        self.kv = grown

    @property
    def capacity(self) -> int:
        return self.kv.shape[1]

    def reserve(self, rows: int) -> None:
        """Grow to at least ``rows`` slots (doubling, so growth is rare)."""
        if rows <= self.capacity:
            return
        extra = max(rows, 2 * self.capacity) - self.capacity
        self.kv = torch.cat([self.kv, self.kv.new_zeros((self.kv.shape[0], extra, *self.kv.shape[2:]))], 1)
        self.lens = torch.cat([self.lens, self.lens.new_zeros(extra)])

    def layer(self, layer: int, row0: int, b: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, S, D] (views) of rows row0.. up to length ``s``."""
        kv = self.kv[layer, row0:row0 + b, :, :s]
        return kv[:, :self.kv_heads], kv[:, self.kv_heads:]

    def step_index(self, row0: int, b: int) -> torch.Tensor:
        """Flat indices [B * 2H] of each row's next slot in one layer's ``kv[layer].view(-1, D)`` (one per step,
        shared by every layer)."""
        h2, s = self.kv.shape[2], self.kv.shape[3]
        rows = torch.arange(row0, row0 + b, device=self.kv.device)
        heads = torch.arange(h2, device=self.kv.device)
        return ((rows[:, None] * h2 + heads[None]) * s + self.lens[row0:row0 + b, None]).flatten()

    def write_step(self, layer: int, index: torch.Tensor, kv: torch.Tensor) -> None:
        """Decode: store kv [B, 2H, D] (one new token per row) at the slots ``step_index`` gave."""
        self.kv[layer].view(-1, kv.shape[-1]).index_copy_(0, index, kv.reshape(-1, kv.shape[-1]))

    def write(self, layer: int, row0: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, H, T, D] of rows row0.. at each row's next slots (T > 1: fresh right-padded rows,
        slots 0..T-1); return the rows' keys and values (views, full length). ``lens`` moves on in ``advance``."""
        b, _, t, _ = k.shape
        if t == 1:
            self.write_step(layer, self.step_index(row0, b), torch.cat([k[:, :, 0], v[:, :, 0]], 1))
        else:
            self.kv[layer, row0:row0 + b, :, :t] = torch.cat([k, v], 1)
        return self.layer(layer, row0, b, self.kv.shape[3])

    def advance(self, row0: int, count: torch.Tensor) -> None:
        """Add ``count`` [B] valid entries to rows row0.."""
        self.lens[row0:row0 + count.shape[0]] += count

    def copy_rows(self, src: list[int], dst: list[int]) -> None:
        """Fork: rows ``dst`` become copies of rows ``src`` (the shared prefix is copied, never recomputed)."""
        s = torch.tensor(src, device=self.kv.device)
        d = torch.tensor(dst, device=self.kv.device)
        n = int(self.lens[s].max())
        self.kv[:, d, :, :n] = self.kv[:, s, :, :n]
        self.lens[d] = self.lens[s]

    def move_row(self, src: int, dst: int) -> None:
        n = int(self.lens[src])
        self.kv[:, dst, :, :n] = self.kv[:, src, :, :n]
        self.lens[dst] = self.lens[src]

    def take(self, row: int, start: int) -> torch.Tensor:
        """Park: a copy of row's entries from ``start`` on, [layers, 2H, n, D]."""
        return self.kv[:, row, :, start:int(self.lens[row])].clone()

    def append(self, row: int, kv: torch.Tensor, active: int | None = None) -> None:
        """Merge: add parked entries [layers, 2H, n, D] after row's own."""
        start, n = int(self.lens[row]), kv.shape[2]
        self.ensure(start + n, active)
        self.kv[:, row, :, start:start + n] = kv
        self.lens[row] += n

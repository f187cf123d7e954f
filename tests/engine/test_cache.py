"""The preallocated row cache: forks, moves and merges copy valid entries only; ``expose`` zeroes a slot once,
before its first read, and never one that holds an entry."""

from __future__ import annotations

import torch

from parathink.engine.cache import ZERO_CHUNK, RowCache
from parathink.engine.decode import bucket

SENTINEL = 7.0


def _cache(rows=4, max_len=200) -> RowCache:
    cache = RowCache(layers=2, rows=rows, kv_heads=1, max_len=max_len, head_dim=3, dtype=torch.float32,
                     device=torch.device("cpu"))
    cache.kv.fill_(SENTINEL)  # stands for whatever the allocation held
    return cache


def _write(cache: RowCache, row: int, n: int, value: float) -> None:
    """Give ``row`` n valid entries, all ``value``."""
    cache.kv[:, row, :, :n] = value
    cache.prefilled(row, [n], n)


def test_fork_copies_each_row_valid_entries_only():
    cache = _cache()
    _write(cache, 0, 5, 1.0)
    _write(cache, 1, 9, 2.0)
    cache.copy_rows([1], [3])
    cache.copy_rows([0, 0], [2, 3])  # one fork into rows 2 and 3
    assert cache.lens[2:] == [5, 5]
    assert (cache.kv[:, 2, :, :5] == 1).all() and (cache.kv[:, 2, :, 5:] == SENTINEL).all()
    # Row 3 got row 1's 9 entries, then row 0's 5: its slots 5..8 keep row 1's entries (finite), past 9 untouched.
    assert (cache.kv[:, 3, :, :5] == 1).all() and (cache.kv[:, 3, :, 5:9] == 2).all()
    assert (cache.kv[:, 3, :, 9:] == SENTINEL).all()
    assert cache.fin[3] == 9  # what it holds past its entries is still finite


def test_move_take_append_touch_valid_entries_only():
    cache = _cache()
    _write(cache, 0, 4, 1.0)
    _write(cache, 1, 6, 2.0)
    parked = cache.take(1, 2)  # path entries after a prefix of 2
    assert parked.shape == (2, 2, 4, 3) and (parked == 2).all()
    cache.append(0, parked)  # merge: row 0 now holds its 4 entries and the 4 parked ones
    assert cache.lens[0] == 8 and (cache.kv[:, 0, :, 4:8] == 2).all() and (cache.kv[:, 0, :, 8:] == SENTINEL).all()
    cache.move_row(0, 3)
    assert cache.lens[3] == 8 and (cache.kv[:, 3, :, 8:] == SENTINEL).all()


def test_expose_zeroes_unread_slots_once_and_never_an_entry():
    cache = _cache()
    _write(cache, 0, 10, 1.0)
    _write(cache, 1, 3, 2.0)
    cache.expose(2, 11)  # row 0 writes slot 10 now and reads 0..10; row 1 reads 0..10, its slots 4..10 masked
    assert (cache.kv[:, 0, :, :10] == 1).all() and (cache.kv[:, 0, :, 10:] == SENTINEL).all()
    assert (cache.kv[:, 1, :, :3] == 2).all() and (cache.kv[:, 1, :, 3] == SENTINEL).all()  # slot 3: written next
    assert (cache.kv[:, 1, :, 4:4 + ZERO_CHUNK] == 0).all() and (cache.kv[:, 1, :, 4 + ZERO_CHUNK:] == SENTINEL).all()
    assert cache.fin[1] == 4 + ZERO_CHUNK
    cache.kv[:, 1, :, 4:8] = 5.0  # a later expose within the zeroed chunk must not zero again
    cache.expose(2, 12)
    assert (cache.kv[:, 1, :, 4:8] == 5).all()
    cache.expose(2, 190)  # past the chunk: zeroed up to the window, capped by the cache's length
    assert (cache.kv[:, 1, :, 4 + ZERO_CHUNK:190] == 0).all() and cache.fin[1] == 190
    assert (cache.kv[:, 0, :, :10] == 1).all()


def test_buckets_are_powers_of_two_capped_by_the_cache():
    assert [bucket(n, 100) for n in (1, 2, 3, 5, 64, 65, 100)] == [1, 2, 4, 8, 64, 100, 100]
    assert bucket(3, 1000, least=64) == 64 and bucket(65, 1000, least=64) == 128 and bucket(900, 901, 64) == 901

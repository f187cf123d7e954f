"""One decode step of the live rows [0, n): eager, or at fixed shapes that CUDA replays as graphs.

Both take the rows' host-side inputs (the token each row feeds, its position, its path id), add each row's
valid entries from the cache's host bookkeeping, upload them in one non-blocking copy, zero what the step reads
for the first time (``RowCache.expose``) and return fp32 logits [n, V]. Neither reads anything back from the
device: the engine's one device-to-host read per step is the sampled tokens (``core``).

- ``EagerDecode`` attends over exactly the longest live row's entries; its shapes change every step.
- ``StaticDecode`` pads the rows to a batch bucket and the window to a length bucket (powers of two, the window
  at least MIN_WINDOW, both capped by the cache), so a few shapes serve a whole ``generate`` call. Padding rows
  are dead cache rows (live rows are [0, n), see ``cache``): the step writes one entry into each and their
  logits are dropped; padding slots are masked like every slot past a row's entries. With ``graphs`` (CUDA)
  each bucket's step is captured once and replayed: one launch per step instead of one per kernel. A graph
  bakes in addresses (the cache, the weights, the input buffer), so the graphs are kept across ``generate``
  calls only while every one of those addresses is unchanged (``bind``). Over a ``PagedCache`` the step reads
  the block table from one device buffer (``device_table``, refilled before each step outside the graph), padding
  rows' tables point at the sink block, and the window bucket fixes the table's columns: the same graphs serve.
  Without CUDA the same buffers and padding run, and the step is called directly where a GPU would replay it.
"""

from __future__ import annotations

import torch

from parathink.engine.cache import RowCache
from parathink.engine.transfer import upload, upload_into

MIN_WINDOW = 64  # the smallest length bucket: short windows cost little, and fewer buckets mean fewer captures


def bucket(n: int, cap: int, least: int = 1) -> int:
    """The smallest power of two >= max(n, least), at most ``cap`` (n <= cap)."""
    size = max(least, 1 << max(0, n - 1).bit_length())
    return min(size, cap)


class EagerDecode:
    def __init__(self, runner):
        self.runner = runner
        self.cache: RowCache | None = None

    def bind(self, cache: RowCache | None) -> None:
        self.cache = cache

    def __call__(self, feed: tuple[list[int], list[int], list[int]], n: int) -> torch.Tensor:
        """feed: (tokens, positions, path ids) of rows [0, n) -> logits [n, V] (fp32)."""
        cache = self.cache
        lens = cache.lens[:n]
        s = max(lens) + 1
        cache.check_len(s)
        cache.expose(n, s)
        x = upload([feed[0], feed[1], lens, feed[2]], torch.long, cache.kv.device)  # [4, n]
        return self.runner.decode(x[0], x[1], x[2], x[3], cache, s).float()


class StaticDecode:
    def __init__(self, runner, graphs: bool):
        self.runner, self.graphs = runner, graphs
        self.cache: RowCache | None = None
        self.inputs: torch.Tensor | None = None  # [4, rows]: tokens, positions, lens, path ids (static addresses)
        self.captured: dict[tuple[int, int], tuple] = {}  # (rows, window) -> (graph, its logits buffer)
        self.pool = None  # one memory pool for every graph: they never run concurrently
        self.addresses: list | None = None

    def bind(self, cache: RowCache | None) -> None:
        """Decode over ``cache`` from now on; drop the graphs if any address they read has changed. ``None`` at the
        end of a call: the cache is freed (the graphs are kept, and replayed only over a cache at its address)."""
        if cache is None:
            self.cache = None
            return
        device = cache.kv.device
        if self.inputs is None or self.inputs.shape[1] < cache.capacity or self.inputs.device != device:
            self.inputs = torch.zeros(4, cache.capacity, dtype=torch.long, device=device)
        table = getattr(cache, "device_table", None)  # a paged cache's block table: the graphs read it too
        addresses = [_address(t) for t in (cache.kv, self.inputs, *([table] if table is not None else []),
                                           *self.runner.tensors())]
        if addresses != self.addresses:
            self.captured, self.pool, self.addresses = {}, None, addresses
        self.cache = cache

    def __call__(self, feed: tuple[list[int], list[int], list[int]], n: int) -> torch.Tensor:
        """feed: (tokens, positions, path ids) of rows [0, n) -> logits [n, V] (fp32, a fresh tensor)."""
        cache = self.cache
        lens = cache.lens[:n]
        cache.check_len(max(lens) + 1)
        b, s = bucket(n, cache.capacity), bucket(max(lens) + 1, cache.max_len, MIN_WINDOW)
        cache.expose(n, s, b)
        pad = [0] * (b - n)  # padding rows feed token 0 at position 0 into their slot 0
        upload_into(self.inputs[:, :b], [feed[0] + pad, feed[1] + pad, lens + pad, feed[2] + pad])
        x = self.inputs

        def step() -> torch.Tensor:
            return self.runner.decode(x[0, :b], x[1, :b], x[2, :b], x[3, :b], cache, s)

        out = self._replay((b, s), step) if self.graphs else step()
        return out[:n].to(torch.float32, copy=True)  # a graph's buffer is overwritten by its next replay

    def _replay(self, key: tuple[int, int], step) -> torch.Tensor:
        if key not in self.captured:
            self.captured[key] = capture(step, self.pool)
            self.pool = self.captured[key][0].pool()
        graph, out = self.captured[key]
        graph.replay()
        return out


def capture(step, pool) -> tuple:
    """(CUDA graph of ``step``, its output buffer). ``step`` runs once on a side stream first, as PyTorch asks
    (lazy initialisations stay out of the capture); it writes the very cache entries the replay writes again."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = step()
    return graph, out


def _address(t: torch.Tensor) -> tuple:
    return t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, str(t.device)

"""The paper's behaviour metrics, defined once (docs/design.md, Formats (metrics)).

- parallel: valid and at least one block; parallel rate = parallel traces / all traces.
- relative position of a block = offset of its opening tag / length of the response, in tokens when a
  tokenizer is given, else in characters; a trace's value is the mean over its blocks; the reported figure
  is the mean over parallel traces (Parallel-R1 §5, Figure 3).
- blocks per trace, paths per block (and how many blocks have each number of paths: NPR's plan count, the
  model's own choice), path lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from parathink.formats.trace import Trace


class _Encoder(Protocol):
    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...


def _n_tokens(tokenizer: _Encoder, text: str) -> int:
    try:
        return len(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # a `tokenizers.Tokenizer`, whose encode returns an Encoding
        enc = tokenizer.encode(text)
        return len(getattr(enc, "ids", enc))


def relative_position(trace: Trace, tokenizer: _Encoder | None = None) -> float | None:
    """Mean relative position of the trace's blocks, or None when the trace is not parallel."""
    if not trace.parallel:
        return None
    text = trace.text
    if tokenizer is None:
        total = len(text)
        return sum(b.start / total for b in trace.blocks) / len(trace.blocks)
    total = _n_tokens(tokenizer, text)
    return sum(_n_tokens(tokenizer, text[: b.start]) / total for b in trace.blocks) / len(trace.blocks)


@dataclass(frozen=True)
class FormatSummary:
    n: int
    valid_rate: float
    parallel_rate: float
    relative_position: float | None  # mean over parallel traces; None when none is parallel
    blocks_per_trace: float  # mean over parallel traces
    paths_per_block: float | None
    path_length: float | None  # mean characters per path

    def as_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


def summarize(traces: Iterable[Trace], tokenizer: _Encoder | None = None) -> FormatSummary:
    n = valid = parallel = n_blocks = n_paths = path_chars = 0
    positions: list[float] = []
    for t in traces:
        n += 1
        if not t.valid:
            continue
        valid += 1
        if not t.blocks:
            continue
        parallel += 1
        n_blocks += len(t.blocks)
        for b in t.blocks:
            n_paths += len(b.paths)
            path_chars += sum(len(p.text) for p in b.paths)
        rp = relative_position(t, tokenizer)
        if rp is not None:
            positions.append(rp)
    return FormatSummary(
        n=n,
        valid_rate=valid / n if n else 0.0,
        parallel_rate=parallel / n if n else 0.0,
        relative_position=sum(positions) / len(positions) if positions else None,
        blocks_per_trace=n_blocks / parallel if parallel else 0.0,
        paths_per_block=n_paths / n_blocks if n_blocks else None,
        path_length=path_chars / n_paths if n_paths else None,
    )


def paths_histogram(traces: Iterable[Trace]) -> dict[int, float]:
    """{number of paths: share of the blocks of parallel traces that have it}, by number of paths; empty when no
    trace is parallel."""
    counts = Counter(len(b.paths) for t in traces if t.parallel for b in t.blocks)
    total = sum(counts.values())
    return {n: counts[n] / total for n in sorted(counts)}

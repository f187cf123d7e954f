"""``results.json``, eval's output: its type in one place, and the one reader and writer everything uses.

Layout: ``{"stages": {stage: {set: SetRow}}, "missing": [stage...], "settings": {...}, "vs_start": {stage: {set:
PairedDelta}}}``. A set named ``<set>@N`` is the set scored at N paths (ParaThinker's path-count rows). Readers
(the tables, the gates, promotion, the report, ``parathink compare``) get it through ``parse``/``read``, which refuse
a file that is not one with a one-line ``BadInput`` naming it.

A row's wall-clock figures (``TIMED``) are not written into results.json, which is hashed with eval's output, but
into the ``results`` section of ``_timings.json`` beside it (``parathink.rundir.timings``); ``read`` puts them back
in their rows, so every reader of a run's eval sees the rows whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

from parathink.errors import BadInput
from parathink.jsonl import parse_object

FILE = "results.json"
TIMED = ("seconds_per_sample",)  # measured, not made: in _timings.json, not in the hashed results.json


class SetRow(TypedDict, total=False):
    """One model on one test set (``evaluation.evaluate.summarize_set``); rates in [0, 1]."""

    n: int  # samples scored (problems x k)
    n_problems: int
    k: int  # samples per problem
    accuracy: float  # mean@k: the share of right samples
    pass_at_k: float  # unbiased pass@k over the problems
    pass_at_1: float
    best_at_k: float
    maj_at_k: float  # the majority answer of the k samples is right
    parallel_rate: float  # samples with at least one well-formed block
    valid_rate: float
    relative_position: float | None  # mean offset of a block's opening tag over the response (None: no block)
    blocks_per_trace: float
    paths_per_block: float | None
    paths_hist: dict[str, float]  # paths (NPR: plans) per block -> share of blocks
    response_length: float
    accuracy_parallel: float | None  # accuracy over the parallel samples alone
    path_accuracy: float | None  # each path of the last block scored on its own
    path_vote_accuracy: float | None  # the paths' plurality answer
    any_path_accuracy: float | None  # at least one right path
    generator: str  # which sampler produced the samples (e.g. engine:structured)
    k_from: str  # "config", or "repeats" when a verl file's repeated rows set k
    repeats: int
    seconds_per_sample: float  # sampling wall time over the samples drawn


class PairedDelta(TypedDict, total=False):
    """mean@k of a stage minus its start's on the same problems, with the paired standard error."""

    start: str
    start_set: str  # for a ``<set>@N`` row: the start's set it is paired with
    delta: float
    se: float


class Results(TypedDict):
    stages: dict[str, dict[str, SetRow]]
    missing: list[str]
    settings: dict
    vs_start: dict[str, dict[str, PairedDelta]]


def parse(text: str | bytes, where: str) -> Results:
    """The content of a results.json, checked for its shape; ``where`` names it in the error."""
    try:
        data = parse_object(text)
    except ValueError as err:
        raise BadInput(f"{where}: {err}") from None
    if not isinstance(data.get("stages"), dict):
        raise BadInput(f"{where}: not a results.json (no 'stages' object)")
    for stage, sets in data["stages"].items():
        if not isinstance(sets, dict) or not all(isinstance(row, dict) for row in sets.values()):
            raise BadInput(f"{where}: stages.{stage} is not an object of result rows")
    data.setdefault("missing", [])
    data.setdefault("settings", {})
    data.setdefault("vs_start", {})
    return data  # type: ignore[return-value]  # checked above


def read(folder: str | Path) -> Results:
    """``<folder>/results.json`` (a local folder or an ``s3://`` prefix), its rows with their times."""
    from parathink import storage
    from parathink.rundir import timings

    location = storage.join(folder, FILE)
    results = parse(storage.read_bytes(location), location)
    for stage, sets in (timings.read(folder).get("results") or {}).items():
        for name, timed in sets.items() if isinstance(sets, dict) else ():
            row = results["stages"].get(stage, {}).get(name)
            if row is not None and isinstance(timed, dict):
                row.update(timed)
    return results


def write(results: Results, folder: Path) -> Path:
    """results.json without the rows' times, which go to ``_timings.json``; returns the results.json written."""
    from parathink.rundir import timings

    made, measured = dict(results), {}
    made["stages"] = {}
    for stage, sets in results["stages"].items():
        made["stages"][stage] = {}
        for name, row in sets.items():
            made["stages"][stage][name], timed = timings.split(row, TIMED)
            if timed:
                measured.setdefault(stage, {})[name] = timed
    path = folder / FILE
    path.write_text(json.dumps(made, indent=1))
    timings.write(folder, results=measured)
    return path


def rows(results: Results) -> Iterator[tuple[str, str, SetRow]]:
    """(stage, set, row) for every row, in the file's order."""
    for stage, sets in results["stages"].items():
        for name, row in sets.items():
            yield stage, name, row

"""What a stage measured about its own run: ``<stage>/_timings.json``, published with the output, never hashed.

A stage's output hash (``parathink.rundir.manifest.tree_hashes``) is what the next stages' up-to-date checks, the
registry's versions and MLflow's dataset digests compare, so it has to name the content: the same config, seed and
inputs give the same bytes, whichever directory or machine the run went to. Wall-clock times and rates differ from
one run to the next, so no hashed file carries them; they go here (docs/reliability.md, "What is hashed and why").
The tracker still gets every figure as it was measured: only the published files are split.

The file is one JSON object of sections, each written by the code that measured it: ``filter_seconds`` (the
filter), ``steps`` (an RL stage's per-step times), ``results`` (eval's sampling time per model and set).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from parathink.jsonl import parse_object

TIMINGS = "_timings.json"


def split(record: Mapping[str, Any], keys: Iterable[str]) -> tuple[dict, dict]:
    """(``record`` without ``keys``, the entries of ``keys`` it has): the hashed and the unhashed part of a record."""
    keys = set(keys)
    return ({k: v for k, v in record.items() if k not in keys}, {k: v for k, v in record.items() if k in keys})


def write(out_dir: Path, **sections: Any) -> Path:
    """Set ``sections`` in ``out_dir/_timings.json``; the sections another writer put there are kept."""
    path = Path(out_dir) / TIMINGS
    data = {**read(out_dir), **sections}
    path.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    return path


def read(folder: str | Path) -> dict:
    """The sections of ``folder/_timings.json`` (a local folder or an ``s3://`` prefix); {} when there is none.

    A damaged file reads as empty: it holds no content a stage consumes, only figures for the reader's eyes.
    """
    from parathink import storage

    uri = storage.join(str(folder), TIMINGS)
    if not storage.exists(uri):
        return {}
    try:
        return parse_object(storage.read_bytes(uri))
    except ValueError:
        return {}

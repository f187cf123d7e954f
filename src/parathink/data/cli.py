"""``parathink data``: look at a problem set before a run points GPUs at it.

    parathink data describe SPEC

SPEC is the problem-set mapping a config holds, as YAML or JSON, e.g. ``'{source: verl, uri: evals.parquet}'`` or
``'{source: verl, uri: s3://bucket/evals.parquet, data_source: APO_AIME24}'``. ``describe`` prints one JSON object
on stdout and nothing else::

    {"n": <problems>, "sources": {"<data_source or source>": {"n": <problems>, "repeats": <rows per problem>}},
     "samples": [<3 records>]}

Notes (which layout read the file) go to stderr. An error is one line on stderr: exit 2 for bad input (the spec,
the file, a data source it does not hold), the error's own code where it has one (an unreachable store: 1).
Only the loader is imported (no torch), so it answers in about a second.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

USAGE = "usage: parathink data describe SPEC   (SPEC: a problem-set mapping, e.g. '{source: verl, uri: FILE}')"
N_SAMPLES = 3


class SpecError(ValueError):
    """SPEC is not a problem-set mapping."""


def parse_spec(text: str) -> dict:
    """The mapping SPEC holds (YAML flow or block style; JSON is YAML): string keys, ``source`` a string, nested no
    deeper than ``parathink.jsonl.MAX_DEPTH``."""
    import yaml  # PyYAML comes with omegaconf

    from parathink.jsonl import MAX_DEPTH, deeper_than

    shown = text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"SPEC {shown!r} is not YAML/JSON ({' '.join(str(e).split())})") from None
    except (RecursionError, ValueError):  # nesting past the parser's stack; an integer past int()'s digit limit
        if text.count("[") + text.count("{") > MAX_DEPTH:
            raise SpecError(f"SPEC {shown!r}: refused, nested deeper than {MAX_DEPTH} levels") from None
        raise SpecError(f"SPEC {shown!r}: refused, it holds a number Python does not convert") from None
    if not isinstance(spec, dict):
        raise SpecError(f"SPEC {shown!r} is not a mapping; expected e.g. '{{source: verl, uri: evals.parquet}}'")
    if deeper_than(spec, MAX_DEPTH, text):
        raise SpecError(f"SPEC {shown!r}: refused, nested deeper than {MAX_DEPTH} levels")
    if not all(isinstance(k, str) for k in spec):
        raise SpecError(f"SPEC {shown!r}: its keys must be strings")
    if "source" in spec and not isinstance(spec["source"], str):  # absent: load_problems says so
        raise SpecError(f"SPEC {shown!r}: 'source' must be a string (a source name, e.g. verl), got "
                        f"{spec.get('source')!r}")
    return spec


def _spread(groups: Mapping[str, list[dict]], n: int) -> list[dict]:
    """Up to ``n`` records, taken from each group in turn, so that a combined file shows several of its sets."""
    picked, queues = [], [list(g) for g in groups.values()]
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


def describe(spec: Mapping[str, Any]) -> dict:
    """Problems, per data source (or source) their count and rows per problem, and sample records."""
    from parathink.data.sources import load_problems, repeats

    records = load_problems(spec)
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(str(rec.get("data_source") or rec["source"]), []).append(rec)
    sources = {}
    for name, group in groups.items():
        counts = repeats(group)
        if len(counts) > 1:
            mixed = ", ".join(f"{n} problems x{r}" for r, n in sorted(counts.items()))
            print(f"[parathink] data: {name}: rows per problem differ ({mixed}); repeats is the most common "
                  f"(the smaller on a tie)", file=sys.stderr)
        sources[name] = {"n": len(group), "repeats": max(counts, key=lambda r: (counts[r], -r))}
    return {"n": len(records), "sources": sources, "samples": _spread(groups, N_SAMPLES)}


def _fail(msg: str, code: int = 2) -> int:
    print(f"parathink data: error: {' '.join(str(msg).split())}", file=sys.stderr)
    return code


def main(argv: list[str]) -> int:
    """``parathink data ...`` (argv: the words after ``data``)."""
    if argv[:1] in (["-h"], ["--help"]) or argv[1:2] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) != 2 or argv[0] != "describe":
        return _fail(f"{USAGE}; got {' '.join(argv) or 'nothing'}")
    try:
        doc = describe(parse_spec(argv[1]))
    except ValueError as e:  # SpecError, SourceError, bad synthetic sizes: exit 2; an unreachable store says 1
        return _fail(str(e), getattr(e, "exit_code", 2))
    print(json.dumps(doc, indent=1, ensure_ascii=False))
    return 0

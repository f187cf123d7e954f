"""What the data gates share (the teacher's, ``stages/teacher/gate.py``, and the filter's, ``stages/filter/gate.py``):
the raw suite's rows of a traces file and where a gate writes its great-expectations data docs."""

from __future__ import annotations

from pathlib import Path

from parathink.quality.gate import GateInput


def raw_rows(path: Path, grammar: str) -> list[dict]:
    """One row per usable line of a raw traces file (what the raw suite reads); unusable lines are left out."""
    from parathink.formats import parse
    from parathink.quality.traces import BadLine, read_raw

    rows = []
    for item in read_raw(path):
        if isinstance(item, BadLine):
            continue
        _, rec = item
        trace = parse(rec["response"], grammar)
        rows.append({"id": str(rec.get("id", "")), "source": str(rec.get("source", "")), "valid": int(trace.valid),
                     "parallel": int(trace.parallel), "length": len(rec["response"])})
    return rows


def data_docs_dir(out: GateInput, section: dict) -> Path | None:
    """Where a gate writes its data docs (``<stage>.gate.data_docs``), or None when it writes none."""
    return out.gate_dir / "data_docs" if section["data_docs"] else None

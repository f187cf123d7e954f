"""The teacher's append-only record store: what makes every backend resumable.

Each finished record is appended (and flushed) to ``raw.jsonl`` in the stage's persistent ``work_dir`` the
moment it exists, keyed by problem id. A rerun after a crash reads the store, drops a torn last line (a write
the crash interrupted), and asks the backend only for the ids still missing: no record is lost and none is
written twice. The stage's published ``raw.jsonl`` is then one record per problem in problem order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from parathink import jsonl


class RawStore:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        self.torn_lines = 0
        self._load()
        self._fh = None

    def _load(self) -> None:
        if not self.path.exists():
            return
        # Not jsonl.scan: a torn line here is expected (a killed append), is dropped without a word, and the file is
        # rewritten from the good lines' own bytes, which scan does not keep.
        good: list[bytes] = []
        for raw in self.path.read_bytes().splitlines():
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                self.torn_lines += 1  # only a killed write produces these: the record is simply redone
                continue
            if isinstance(rec, dict) and "id" in rec and rec["id"] not in self.records:
                self.records[rec["id"]] = rec
                good.append(raw)
        if self.torn_lines:
            # Rewrite without the torn line, atomically, so that the next append starts on a clean line.
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_bytes(b"".join(line + b"\n" for line in good))
            os.replace(tmp, self.path)

    def __contains__(self, record_id: str) -> bool:
        return record_id in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict) -> None:
        if record["id"] in self.records:
            return  # a backend that yields an id twice does not duplicate it
        if self._fh is None:
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(jsonl.dumps(record) + "\n")
        self._fh.flush()
        self.records[record["id"]] = record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def ordered(self, problems: Iterable[dict]) -> list[dict]:
        """The stored records of ``problems``, in their order (problems never generated are left out)."""
        return [self.records[p["id"]] for p in problems if p["id"] in self.records]

    def __enter__(self) -> RawStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""JSON lines that never fail to encode.

``"\\ud800"`` is valid JSON, and ``json.loads`` turns it into a lone surrogate: a ``str`` that UTF-8 cannot encode.
Written back with ``ensure_ascii=False`` it raises ``UnicodeEncodeError`` (an endpoint that returns one crashed the
teacher on every rerun). ``dumps`` keeps text readable and falls back to ``\\u`` escapes for such a record only;
``lone_surrogate`` names the field that holds one, so a reader can reject the record with a reason. ``load_record``
reads the small JSON records a run keeps, a damaged one being a warning, not a crash.

``scan`` and ``read`` are the one reader of JSON-lines files (raw traces, accepted traces, prompt sets, step
metrics): every non-blank line is a JSON object, and a line that is not one is named as ``file:line: why``. The two
differ for a reason: the trace filter must go on past a bad line and count it in its report (``scan`` yields a
``BadLine``), every other reader must stop at the first one (``read`` raises the caller's error, so that its exit
code stays the caller's: a bad prompt file is a ``SourceError``, a bad input to ``parathink score`` an
``InputError``).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parathink.errors import BadInput


def dumps(record: Any) -> str:
    text = json.dumps(record, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record)  # the escaped form round-trips exactly
    return text


def lone_surrogate(obj: Any, where: str = "") -> str | None:
    """The key path of the first string in ``obj`` holding a lone surrogate (``"response"``), or None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "value"
        return None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        found = lone_surrogate(value, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def parse_object(data: bytes | str) -> dict:
    """The JSON object in ``data``; ValueError saying why when it is not one."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def load_record(path: Path, consequence: str) -> dict | None:
    """A small JSON record a run keeps (a scratch marker, a cached summary); None when it is absent, and also when
    it is damaged, with a warning naming the file and ``consequence`` (what happens instead)."""
    try:
        return parse_object(Path(path).read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as err:
        print(f"[parathink] warning: {path} is damaged ({err}); {consequence}", file=sys.stderr, flush=True)
        return None


@dataclass
class BadLine:
    """A line of a JSONL file that cannot be used, and why."""

    file: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.why}"


def scan(source: str | Path | bytes, where: str | None = None) -> Iterator[tuple[int, dict] | BadLine]:
    """``(line number, object)`` for every non-blank line of a JSONL file, or a ``BadLine`` saying why the line is
    not a JSON object. ``source`` is a path, read line by line (a teacher's raw traces run to gigabytes), or the
    bytes of an object already fetched (from S3), named by ``where``. Lines end at ``\\n`` only, as JSONL says."""
    if isinstance(source, bytes):
        yield from _scan_lines(io.BytesIO(source), where or "<bytes>")
        return
    with Path(source).open("rb") as f:
        yield from _scan_lines(f, where or str(source))


def read(source: str | Path | bytes, where: str | None = None,
         error: Callable[[str], Exception] = BadInput) -> Iterator[tuple[int, dict]]:
    """``scan``, stopping at the first bad line with ``error("file:line: why")``."""
    for item in scan(source, where):
        if isinstance(item, BadLine):
            raise error(str(item))
        yield item


def _scan_lines(lines: io.BufferedIOBase, where: str) -> Iterator[tuple[int, dict] | BadLine]:
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        obj = _parse_line(raw)
        yield BadLine(where, lineno, obj) if isinstance(obj, str) else (lineno, obj)


def _parse_line(raw: bytes) -> dict | str:
    """The object on one line, or why there is none."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 ({e.reason} at byte {e.start})"
    try:
        obj = json.loads(text.rstrip("\r\n"))  # without the line's end, a column past the last is still on this line
    except json.JSONDecodeError as e:
        return f"not JSON ({e.msg} at column {e.colno})"
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    return obj

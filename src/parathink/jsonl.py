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

Every reader here is bounded: a value nested deeper than ``MAX_DEPTH`` (``[[[[...]]]]``: Python's decoder recurses
and raised ``RecursionError`` past ~1,000 levels, and any code that walks such a record recurses too) and an integer of
more digits than Python converts (4,300: ``ValueError``) make the line a bad one, named like any other, never a
traceback.
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

# Nesting of arrays and objects a record may have; no record parathink reads or writes comes near it.
MAX_DEPTH = 100


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
        obj = _loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _loads(text: bytes | str) -> Any:
    """``json.loads``, bounded: ``TooDeep`` for a value nested deeper than ``MAX_DEPTH``, ``TooLong`` for an integer
    of more digits than Python converts; its own errors otherwise."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise TooDeep(f"refused: nested deeper than {MAX_DEPTH} levels (jsonl.MAX_DEPTH)") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise
    except ValueError:  # an integer of more digits than int() converts (sys.get_int_max_str_digits)
        raise TooLong(f"refused: an integer of more than {sys.get_int_max_str_digits()} digits") from None
    if deeper_than(obj, MAX_DEPTH, text):
        raise TooDeep(f"refused: nested deeper than {MAX_DEPTH} levels (jsonl.MAX_DEPTH)")
    return obj


class TooDeep(ValueError):
    """JSON nested deeper than ``MAX_DEPTH``."""


class TooLong(ValueError):
    """A JSON integer of more digits than Python converts."""


def deeper_than(obj: Any, limit: int, text: bytes | str = "[" * (MAX_DEPTH + 1)) -> bool:
    """Whether ``obj`` nests lists and mappings more than ``limit`` deep (without recursing). When ``text`` (what it
    was parsed from) holds no more than ``limit`` brackets it cannot, and most records are decided by that count."""
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) <= limit:
        return False
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


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
        obj = _loads(text.rstrip("\r\n"))  # without the line's end, a column past the last is still on this line
    except json.JSONDecodeError as e:
        return f"not JSON ({e.msg} at column {e.colno})"
    except (TooDeep, TooLong) as e:
        return str(e)
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    return obj

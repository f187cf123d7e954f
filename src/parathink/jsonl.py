"""JSON lines that never fail to encode.

``"\\ud800"`` is valid JSON, and ``json.loads`` turns it into a lone surrogate: a ``str`` that UTF-8 cannot encode.
Written back with ``ensure_ascii=False`` it raises ``UnicodeEncodeError`` (an endpoint that returns one crashed the
teacher on every rerun). ``dumps`` keeps text readable and falls back to ``\\u`` escapes for such a record only;
``lone_surrogate`` names the field that holds one, so a reader can reject the record with a reason. ``load_record``
reads the small JSON records a run keeps, a damaged one being a warning, not a crash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


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
        raise ValueError(f"a JSON object was expected, got {type(obj).__name__}")
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

"""What a config value must be beyond its type: bounds and choices, declared with the field they bound.

    lr: float = above(0, 1.2e-3)                  # > 0
    warmup_ratio: float = fraction(0.1)           # in [0, 1]
    top_p: float = probability_mass(1.0)          # in (0, 1]
    checkpoint_every: int = at_least(1, 25)       # >= 1
    kind: str = one_of(("tiny", "pretrained"), "tiny")

``parathink.config_schema`` checks every field of every section of the composed config against its type and these
(``parathink.quality.thresholds``' ``rate()`` and ``not_below()`` declare the same ``bounds``), and says in words what
a refused value must be (``requirement``). A null value of an ``X | None`` field is never out of bounds: null is that
field's "off". No imports beyond the standard library: every schema module may use these.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any

# metadata keys: "bounds" (low, high), either None, both inclusive; "above" a strict lower bound; "choices" a tuple


def at_least(low: float, default: Any) -> Any:
    return field(default=default, metadata={"bounds": (low, None)})


def above(low: float, default: Any) -> Any:
    return field(default=default, metadata={"above": low})


def within(low: float, high: float, default: Any, *, open_low: bool = False) -> Any:
    """In [low, high]; in (low, high] with ``open_low``."""
    return field(default=default, metadata={"above": low, "bounds": (None, high)} if open_low else
                 {"bounds": (low, high)})


def probability_mass(default: Any) -> Any:
    """A nucleus (top-p): in (0, 1]."""
    return within(0.0, 1.0, default, open_low=True)


def fraction(default: Any) -> Any:
    """A share or a probability: in [0, 1]."""
    return within(0.0, 1.0, default)


def one_of(choices: tuple[str, ...], default: Any) -> Any:
    return field(default=default, metadata={"choices": tuple(choices)})


def optional_of(hint: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether null is allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else Any), len(args) < len(typing.get_args(hint))
    return hint, hint is Any


def _kind(hint: Any) -> str:
    origin = typing.get_origin(hint) or hint
    if dataclasses.is_dataclass(origin):
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
            tuple: "a list", dict: "a mapping"}.get(origin, "any value")


def requirement(hint: Any, f: dataclasses.Field | None = None) -> str:
    """What a value of this field must be, in words: ``a number in [0, 1] or null``."""
    base, nullable = optional_of(hint)
    meta = f.metadata if f is not None else {}
    if "choices" in meta:
        what = f"one of {', '.join(map(str, meta['choices']))}"
    else:
        what = _kind(base)
        low, high = meta.get("bounds", (None, None))
        if "above" in meta and high is not None:
            what += f" in ({meta['above']:g}, {high:g}]"
        elif low is not None and high is not None:
            what += f" in [{low:g}, {high:g}]"
        elif low is not None:
            what += f" >= {low:g}"
        elif "above" in meta:
            what += f" > {meta['above']:g}"
    return what + (" or null" if nullable and base is not Any else "")


def violation(f: dataclasses.Field, value: Any) -> bool:
    """Whether ``value`` (of the field's type already) lies outside the bounds or choices ``f`` declares."""
    if value is None:
        return False
    meta = f.metadata
    if "choices" in meta:
        return value not in meta["choices"]
    low, high = meta.get("bounds", (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        return True
    return "above" in meta and not value > meta["above"]

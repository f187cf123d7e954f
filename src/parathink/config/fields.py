"""What a config value must be beyond its type: bounds and choices, declared with the field they bound.

    lr: float = above(0, 1.2e-3)                  # > 0
    warmup_ratio: float = fraction(0.1)           # in [0, 1]
    top_p: float = probability_mass(1.0)          # in (0, 1]
    checkpoint_every: int = at_least(1, 25)       # >= 1
    kind: str = one_of(("tiny", "pretrained"), "tiny")

``pipeline/schema.py`` checks every field of every section of the composed config against its type and these
(``parathink.config.thresholds``' ``rate()`` and ``not_below()`` declare the same ``bounds``), and says in words what
a refused value must be (``requirement``). A null value of an ``X | None`` field is never out of bounds: null is that
field's "off". No imports beyond the standard library: every schema module may use these.

Two rules hold for every field, declared or not (``violation``): a float is finite (``nan`` and ``inf`` pass every
comparison a bound makes, or fail it, in ways no stage expects: ``sft.lr=nan`` trained on silently), and an integer is
at most ``INT_CEILING`` (10^12: no count of steps, tokens, problems or seconds a run could reach comes near it, and
past 2^63 a value overflows the int64 arithmetic of numpy and torch instead of failing here). Fields whose unit has a
tighter ceiling declare it: ``seed`` ([0, 2^32): numpy's and torch's generators take any of them), ``steps`` (at most
``MAX_STEPS``), ``tokens`` (at most ``MAX_TOKENS``: no model's context comes near it), ``count`` (problems, samples:
at most ``MAX_COUNT``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import field
from typing import Any

# metadata keys: "bounds" (low, high), either None, both inclusive; "above" a strict lower bound; "choices" a tuple

INT_CEILING = 10**12  # every integer field's, unless it declares a lower one
SEED_END = 2**32  # seeds are in [0, SEED_END)
MAX_STEPS = 10**8  # optimiser steps: at 10 steps a second, about a year
MAX_TOKENS = 2**24  # tokens in one sequence or one response budget: ~16.8M, past any model's context
MAX_COUNT = 10**9  # problems, samples, records a stage reads or makes


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


def seed(default: Any) -> Any:
    """A random seed: an integer in [0, 2^32)."""
    return within(0, SEED_END - 1, default)


def steps(default: Any, low: float | None = None) -> Any:
    """Optimiser steps: at most ``MAX_STEPS`` (and at least ``low`` when given)."""
    return field(default=default, metadata={"bounds": (low, MAX_STEPS)})


def tokens(default: Any, low: float = 1) -> Any:
    """A token count or budget: in [low, ``MAX_TOKENS``]."""
    return within(low, MAX_TOKENS, default)


def count(default: Any, low: float = 1) -> Any:
    """Problems, samples or records: in [low, ``MAX_COUNT``]."""
    return within(low, MAX_COUNT, default)


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


def _num(x: float) -> str:
    """A bound as written: 4294967295, not 4.29497e+09."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


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
            what += f" in ({_num(meta['above'])}, {_num(high)}]"
        elif low is not None and high is not None:
            what += f" in [{_num(low)}, {_num(high)}]"
        elif low is not None:
            what += f" >= {_num(low)}"
        elif "above" in meta:
            what += f" > {_num(meta['above'])}"
        elif high is not None:
            what += f" <= {_num(high)}"
    return what + (" or null" if nullable and base is not Any else "")


def beyond_any_field(value: Any) -> str | None:
    """What the rules every field keeps say of ``value`` (a float that is not finite, an integer past
    ``INT_CEILING``): the requirement it breaks, in words; None when it keeps them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_CEILING:
        return "an integer within ±10^12 (config_fields.INT_CEILING)"
    return None


def violation(f: dataclasses.Field, value: Any) -> bool:
    """Whether ``value`` (of the field's type already) lies outside the bounds or choices ``f`` declares."""
    if value is None:
        return False
    if beyond_any_field(value):
        return True
    meta = f.metadata
    if "choices" in meta:
        return value not in meta["choices"]
    low, high = meta.get("bounds", (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        return True
    return "above" in meta and not value > meta["above"]

"""Functions a config picks by name: advantage estimators, policy losses, loss aggregations, reward schemes.

A ``Registry`` is a dict from name to function, filled by its ``register(name)`` decorator. Looking up a name it
does not hold raises ``UnknownName``, one line listing the names it knows (exit 2, as any bad configuration);
registering a name twice is refused, so a second function cannot silently replace the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from parathink.errors import ConfigError

F = TypeVar("F", bound=Callable)


class UnknownName(ConfigError, KeyError):
    """A name no function is registered under. A KeyError too, since it is a failed lookup."""

    __str__ = ConfigError.__str__  # KeyError's would quote the message


class Registry(dict[str, F]):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind  # "advantage estimator": how the errors call an entry

    def register(self, name: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self[name] = fn
            return fn

        return add

    def __missing__(self, name: str):
        raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self))}")

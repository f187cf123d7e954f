"""Which engine samples: ``<stage>.rollout`` of the RL stages and ``eval.rollout`` (the gates' probes follow eval's).

``native`` is parathink's engine, every mode. ``vllm`` is a vLLM engine colocated with the stage's process, in
vLLM's own venv (``parathink.vllm_rollout``): causal mode only, as the structured layouts (path-private attention,
restarted positions) need the native engine. No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from parathink.errors import ConfigError

BACKENDS = ("native", "vllm")


@dataclass(frozen=True)
class RolloutBackend:
    # native: parathink's engine (every mode) | vllm: vLLM colocated, in its own venv (causal mode only)
    backend: str = "native"
    enforce_eager: bool = True  # vllm: no CUDA graphs (they are captured again after each weight load otherwise)
    prefix_caching: bool = True  # vllm: the samples of one prompt share its KV

    @classmethod
    def build(cls, node: Mapping[str, Any] | RolloutBackend | None, where: str):
        """The section from its mapping (unknown keys named), or as it is."""
        if node is None or isinstance(node, RolloutBackend):
            return node if node is not None else cls()
        unknown = sorted(set(node) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown rollout setting")
        return cls(**dict(node))

    def check(self, where: str, modes: Iterable[tuple[str, str]]) -> None:
        """A known backend; with vllm, every ``(setting, mode)`` it would sample must be causal (one line)."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"{where}.backend={self.backend!r}: expected one of {BACKENDS}")
        if self.backend != "vllm":
            return
        for setting, mode in modes:
            if mode != "causal":
                raise ConfigError(f"{where}.backend=vllm: {setting}={mode!r} needs the native engine (vLLM cannot "
                                  f"fork paths with private attention and restarted positions); use "
                                  f"{where}.backend=native, or mode causal")

"""``FilterStageConfig``: the settings of the ``filter`` stage (``stages/filter/``).

The stage keeps the teacher's traces that are parallel (valid format, >= 1 block) AND correct, within length
bounds, one per problem (Parallel-R1 §3.1), with ``parathink.quality.traces``. The defaults are the tiny
curriculum's; ``hydra_conf/stage/filter.yaml`` holds the gate thresholds, an experiment what it changes
(``parallel_r1_seen``: longer traces). The class is the Hydra schema of that file (``pipeline/compose.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parathink.config.fields import at_least
from parathink.config.thresholds import FilterThresholds
from parathink.errors import ConfigError


@dataclass(frozen=True)
class LengthBounds:
    """Response length bounds in characters; longer traces cost SFT memory and time."""

    min_chars: int = at_least(0, 1)
    max_chars: int = at_least(1, 4000)  # tiny curriculum's traces: < 1,000 characters; R1-style ones: ~20,000


@dataclass(frozen=True)
class FilterConfig:
    """What ``parathink.quality.traces`` judges a trace against; the stage builds it with ``bounds()``."""

    grammar: str = "parallel_r1"
    min_chars: int = LengthBounds.min_chars
    max_chars: int = LengthBounds.max_chars
    one_per_problem: bool = True


@dataclass(frozen=True)
class FilterStageConfig:
    enabled: bool = True  # false: `parathink run` leaves the stage out
    input: str | None = None  # raw traces (JSONL, a path or s3://); null = the teacher stage's raw.jsonl
    output: str | None = None  # a folder to write to as well; null = only this stage's output in the run directory
    format: str = "${format}"  # grammar the traces are parsed with: parallel_r1 | npr | parathinker
    one_per_problem: bool = True  # keep the first accepted trace of each problem: a problem weighs 1 in SFT
    length: LengthBounds = field(default_factory=LengthBounds)
    # The data-quality gate (stages/filter/gate.py, docs/gates.md); its thresholds are in
    # filter.yaml. Not part of the config hash.
    gate: FilterThresholds = field(default_factory=FilterThresholds)

    @classmethod
    def of(cls, cfg) -> FilterStageConfig:
        """The root config's ``filter`` section."""
        from omegaconf import OmegaConf

        return cls.from_cfg(OmegaConf.to_container(cfg.filter, resolve=True))

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> FilterStageConfig:
        """The ``filter`` section (resolved, as plain data), checked; errors name ``filter.<key>``."""
        values = dict(node)
        values["length"] = LengthBounds(**dict(values.get("length") or {}))
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self) -> None:
        from parathink.formats.tags import GRAMMARS

        if self.format not in GRAMMARS:
            raise ConfigError(f"filter.format: {self.format!r} is not one of {', '.join(GRAMMARS)}")
        if self.length.min_chars > self.length.max_chars:
            raise ConfigError(f"filter.length: min_chars {self.length.min_chars} > max_chars {self.length.max_chars}")
        if self.input is not None and not self.input.startswith("s3://") and not Path(self.input).is_file():
            raise ConfigError(f"filter.input: {self.input} is not a file")

    def bounds(self) -> FilterConfig:
        return FilterConfig(grammar=self.format, min_chars=self.length.min_chars, max_chars=self.length.max_chars,
                            one_per_problem=self.one_per_problem)

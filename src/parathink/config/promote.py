"""``PromoteConfig``: when the registry's ``champion`` alias moves (``tracking.promote``; docs/design.md, "Tracking").

Read by the ``promote`` stage (``stages/promote/``: this run's best model against the champion) and by
``parathink promote`` (``pipeline/commands.py (main_promote)``: a named version or alias against it). The
class is the Hydra schema of ``tracking.promote`` (``hydra_conf/tracking/sqlite.yaml``, ``pipeline/compose.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parathink.config.fields import at_least
from parathink.errors import ConfigError


@dataclass(frozen=True)
class PromoteConfig:
    metric: str = "hard.accuracy"  # <eval set>.<key of results.json> the candidate and the champion are compared on
    margin: float = 0.0  # the candidate must beat the champion by more than this
    candidate: str = "candidate"  # `parathink promote`: the alias or version number it promotes
    # Champion/challenger (parathink.tracking.challenge): the promote stage samples the champion and the candidate on
    # the same problems with the same seeds and promotes only when, on every metric of [metric, *metrics], the paired
    # gain exceeds the margin by `ses` standard errors, and no guard falls by more than its allowance. false: compare
    # the scores stored on the two versions (each from its own run's sampling), as `parathink promote` does.
    paired: bool = True
    metrics: list = field(default_factory=list)  # more <set>.<key> the candidate must also win on
    ses: float = at_least(0, 2.0)  # standard errors of the paired difference the gain must clear beyond the margin
    # <key> -> the largest fall allowed (paired mean, on every set compared): the parallel format must not decay.
    guards: dict = field(default_factory=lambda: {"parallel_rate": 0.05, "valid_rate": 0.05})
    problems: int = at_least(2, 100)  # problems per set sampled for the comparison (the set's first eval problems)
    k: int = at_least(1, 4)  # samples per problem for each model

    @classmethod
    def of(cls, cfg) -> PromoteConfig:
        """The root config's rule; refused without the MLflow registry to promote in."""
        if str(cfg.tracking.backend) != "mlflow":
            raise ConfigError(f"promote: needs the MLflow registry (tracking.backend=mlflow), got "
                              f"tracking.backend={cfg.tracking.backend}")
        return cls.from_cfg(cfg.tracking.promote)

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> PromoteConfig:
        plain = dict(node)
        cfg = cls(metric=str(plain["metric"]), margin=plain["margin"], candidate=str(plain["candidate"]),
                  paired=plain.get("paired", True), metrics=[str(m) for m in plain.get("metrics") or []],
                  ses=plain.get("ses", 2.0), guards=dict(plain.get("guards") or {}),
                  problems=plain.get("problems", 100), k=plain.get("k", 4))
        cfg.check()
        return cfg

    @property
    def compared(self) -> list[str]:
        """Every ``<set>.<key>`` the candidate must win on, the main metric first."""
        return list(dict.fromkeys([self.metric, *self.metrics]))

    @property
    def sets(self) -> list[str]:
        """The eval sets the paired comparison samples: those the metrics name."""
        return list(dict.fromkeys(m.partition(".")[0] for m in self.compared))

    def check(self) -> None:
        if "." not in self.metric:
            raise ConfigError(f"tracking.promote.metric: must be <eval set>.<key> (e.g. hard.accuracy), got "
                              f"{self.metric!r}")
        for m in self.metrics:
            if "." not in m:
                raise ConfigError(f"tracking.promote.metrics: each must be <eval set>.<key>, got {m!r}")
        for key, value in {"margin": self.margin, "ses": self.ses,
                           **{f"guards.{g}": v for g, v in self.guards.items()}}.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"tracking.promote.{key}: must be a number, got {value!r}")
        if self.ses < 0 or any(v < 0 for v in self.guards.values()):
            raise ConfigError("tracking.promote.ses and tracking.promote.guards.*: must be >= 0")
        for key in ("problems", "k"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < (2 if key == "problems" else 1):
                raise ConfigError(f"tracking.promote.{key}: must be an integer >= {2 if key == 'problems' else 1}"
                                  f" (a paired standard error needs two problems), got {value!r}")


@dataclass(frozen=True)
class PromoteStageConfig:
    """The ``promote`` stage's own section (``hydra_conf/stage/promote.yaml``); the rule it applies is
    ``tracking.promote`` (``PromoteConfig``), shared with ``parathink promote``."""

    enabled: bool = True  # false: `parathink run` leaves the stage out

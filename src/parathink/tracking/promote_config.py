"""``PromoteConfig``: when the registry's ``champion`` alias moves (``tracking.promote``; docs/design.md, "Tracking").

Read by the ``promote`` stage (``parathink.stages.promote``: this run's best model against the champion) and by
``parathink promote`` (``parathink.tracking.registry.main_promote``: a named version or alias against it). The
class is the Hydra schema of ``tracking.promote`` (``hydra_conf/tracking/sqlite.yaml``, ``parathink.config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from parathink.errors import ConfigError


@dataclass(frozen=True)
class PromoteConfig:
    metric: str = "hard.accuracy"  # <eval set>.<key of results.json> the candidate and the champion are compared on
    margin: float = 0.0  # the candidate must beat the champion by more than this
    candidate: str = "candidate"  # `parathink promote`: the alias or version number it promotes

    @classmethod
    def of(cls, cfg) -> "PromoteConfig":
        """The root config's rule; refused without the MLflow registry to promote in."""
        if str(cfg.tracking.backend) != "mlflow":
            raise ConfigError(f"promote: needs the MLflow registry (tracking.backend=mlflow), got "
                              f"tracking.backend={cfg.tracking.backend}")
        return cls.from_cfg(cfg.tracking.promote)

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> "PromoteConfig":
        cfg = cls(metric=str(node["metric"]), margin=node["margin"], candidate=str(node["candidate"]))
        cfg.check()
        return cfg

    def check(self) -> None:
        if "." not in self.metric:
            raise ConfigError(f"tracking.promote.metric: must be <eval set>.<key> (e.g. hard.accuracy), got "
                              f"{self.metric!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)):
            raise ConfigError(f"tracking.promote.margin: must be a number, got {self.margin!r}")

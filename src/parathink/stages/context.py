"""What a stage function receives besides its config.

Every stage is ``run(cfg, ctx) -> dict[str, float]`` in ``parathink/stages/<name>.py`` (optionally with
``validate(cfg) -> None`` that raises ``parathink.errors.ConfigError`` before any stage starts). The runner builds the
context: it publishes ``out_dir`` atomically when ``run`` returns (so a killed stage never leaves a
finished-looking output), keeps ``work_dir`` across reruns (checkpoints live there, so a killed stage
resumes), and resolves earlier stages' outputs through ``input``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from parathink.errors import StageInputMissing
from parathink.tracking.tracker import NullTracker, Tracker


@dataclass
class StageContext:
    name: str
    out_dir: Path  # write final outputs here; published atomically by the runner
    work_dir: Path  # persistent scratch: checkpoints for resume survive a kill here
    seed: int = 0
    tracker: Tracker = field(default_factory=NullTracker)
    # Maps an earlier stage's name to the local directory of its published outputs.
    resolve_input: Callable[[str], Path] | None = None
    progress: bool = field(default_factory=lambda: os.environ.get("CI", "").lower() not in ("1", "true"))

    def input(self, stage: str) -> Path:
        if self.resolve_input is None:
            raise StageInputMissing(f"stage {self.name!r} needs outputs of {stage!r}, but no run directory is set")
        path = self.resolve_input(stage)
        if not path.exists():
            raise StageInputMissing(f"stage {self.name!r} needs outputs of {stage!r}: {path} does not exist")
        return path

    @classmethod
    def standalone(cls, name: str, root: str | Path, seed: int = 0, tracker: Tracker | None = None) -> StageContext:
        """A context for tests and notebooks: outputs under ``root/<name>``, inputs under ``root/<stage>``."""
        root = Path(root)
        out, work = root / name, root / f".work/{name}"
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        return cls(name=name, out_dir=out, work_dir=work, seed=seed, tracker=tracker or NullTracker(),
                   resolve_input=lambda stage: root / stage)

"""Runner fixtures: a curriculum of plug-in test stages (``resume_stage.py``) in a fresh run directory."""

import json
from pathlib import Path

import pytest

STAGE_FILE = str(Path(__file__).with_name("resume_stage.py"))


class Curriculum:
    """Overrides for a chain of test stages: prep -> train -> tune (each reads the one before)."""

    def __init__(self, tmp_path: Path, run_dir: str | None = None, tracking: str = "none"):
        self.tmp = tmp_path
        self.run_dir = run_dir or str(tmp_path / "run")
        self.calls = tmp_path / "calls.jsonl"
        self.tracking = tracking
        self.sections = {
            "prep": {"steps": 2},
            "train": {"steps": 4, "input": "prep", "model": True},
            "tune": {"steps": 3, "input": "train", "model": True},
        }

    def overrides(self, *extra: str, stages=("prep", "train", "tune")) -> list[str]:
        out = [f"run_dir={self.run_dir}", f"tracking={self.tracking}", f"stages=[{','.join(stages)}]"]
        for name, section in self.sections.items():
            out.append(f"+stage_modules.{name}={STAGE_FILE}")
            out.append(f"+{name}.calls={self.calls}")
            out += [f"+{name}.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in section.items()]
        return out + list(extra)

    def calls_made(self) -> list[dict]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines()]

    def ran(self) -> list[str]:
        return [c["stage"] for c in self.calls_made()]


@pytest.fixture
def curriculum(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default sqlite:///mlflow.db and ./mlartifacts land here
    monkeypatch.setenv("CI", "true")
    return Curriculum(tmp_path)

"""The names `make images` gives the images (images/build.sh): PREFIX/NAME:<package version>, :<commit>, :latest."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "localhost/parathink"


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def ref(name: str) -> str:
    return f"{PREFIX}/{name}:{version()}"

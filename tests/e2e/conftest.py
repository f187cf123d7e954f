"""tests/e2e: the images `make images` built, run with podman (make test builds them first: TEST_DEPS)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: needs `make images` (make test builds them first)")

"""Where parathink's Hydra config folder is, and how a path a config names is found (no schema, no Hydra).

Apart from ``pipeline.compose`` (which composes and validates) so that modules the schema itself imports (the cluster
profile, the memory model) can resolve a config file without importing the schema back.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[1] / "hydra_conf"  # present in an installed wheel only
CHECKOUT = Path(__file__).resolve().parents[3] / "hydra_conf"  # src/parathink/config/paths.py -> <checkout>/hydra_conf


def config_dir() -> Path:
    """The folder Hydra composes from: ``PARATHINK_CONFIG_DIR``, else the wheel's copy, else the checkout's."""
    env = os.environ.get("PARATHINK_CONFIG_DIR")
    if env:
        return Path(env)
    return PACKAGED if (PACKAGED / "config.yaml").is_file() else CHECKOUT


def resolve_config_path(value: str) -> str:
    """A file a config names (``hydra_conf/deepspeed/zero2.json``) as a real path wherever parathink runs.

    Paths are written relative to the checkout; a path that does not exist as given and starts with
    ``hydra_conf/`` is looked up in :func:`config_dir` instead (the wheel's copy in a pod).
    """
    path = Path(value)
    if path.is_absolute() or path.exists():
        return str(path)
    parts = path.parts
    if parts and parts[0] == "hydra_conf":
        return str(config_dir().joinpath(*parts[1:]))
    return str(path)

"""The stage manifest: what a published stage output was made from, and what it holds.

A stage's output folder ends with ``_manifest.json``. The runner writes it last (inside the temporary
folder before the atomic rename; last in the upload for S3), so its presence is the only mark of a complete
output. It records the config hash (the stage's own section plus the shared keys it reads), the output
hashes of the stages it read through ``ctx.input`` (its inputs), the content hash of every output file,
the metrics ``run`` returned, and the times. A rerun skips the stage when the config hash and the inputs'
hashes are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

MANIFEST = "_manifest.json"
# Keys outside a stage's own section that change what any stage produces. A stage module may narrow or
# extend this with a module-level SHARED_KEYS tuple.
DEFAULT_SHARED_KEYS = ("model", "data", "format", "seed")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def stage_config(cfg: DictConfig, stage: str, shared_keys: tuple[str, ...]) -> dict:
    """The part of the config a stage depends on, resolved: its own section plus the shared keys."""
    out = {"stage": OmegaConf.to_container(cfg[stage], resolve=True)}
    for key in shared_keys:
        if key in cfg:
            node = cfg[key]
            out[key] = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return out


def config_hash(section: dict) -> str:
    return hashlib.sha256(_canonical(section).encode()).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_hashes(root: Path) -> tuple[str, dict[str, dict]]:
    """(hash of the whole tree, {relative path: {sha256, size}}) for every file but the manifest."""
    files: dict[str, dict] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != MANIFEST:
            files[rel] = {"sha256": file_sha256(p), "size": p.stat().st_size}
    digest = hashlib.sha256(_canonical({k: v["sha256"] for k, v in files.items()}).encode()).hexdigest()
    return digest[:16], files


@dataclass
class Manifest:
    stage: str
    config_hash: str
    config: dict
    inputs: dict[str, str | None]  # input stage -> its output hash when read (None: absent)
    output_hash: str = ""
    outputs: dict[str, dict] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    duration_s: float = 0.0
    mlflow_run_id: str | None = None
    version: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def finish(self, out_dir: Path, metrics: dict[str, float]) -> None:
        self.output_hash, self.outputs = tree_hashes(out_dir)
        self.metrics = {k: float(v) for k, v in (metrics or {}).items()}
        self.finished_at = time.time()
        self.duration_s = round(self.finished_at - self.started_at, 3)

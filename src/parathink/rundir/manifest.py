"""The stage manifest: what a published stage output was made from, and what it holds.

A stage's output folder ends with ``_manifest.json``. The runner writes it last (inside the temporary
folder before the atomic rename; last in the upload for S3), so its presence is the only mark of a complete
output. It records the config hash (the stage's own section plus the shared keys it reads, as
``parathink.redact`` allows them to be recorded), the output hashes of the stages it read through ``ctx.input``
(its inputs), the fingerprints of the files it read from outside the run directory (``external``: a
``filter.input``, a data set's JSONL), the content of every output file (SHA-256 and size; the mtime locally,
S3's ETag remotely, so that a later check costs a ``stat`` or one listing), the metrics ``run`` returned, the
times, and the verdict of the stage's quality gate (``gates``; its report lives in ``_gates/``, outside the output
hash, so that a gate evaluated again leaves the output's identity alone). A rerun skips the stage when all of these
still hold (``pipeline/runner.py (is_up_to_date)``). An output copied from the stage cache keeps its producer's
manifest and says where it came from (``origin``: that run directory and the cache key).

The output hash covers every file of the folder but three: this manifest, ``_gates/`` and ``_timings.json`` (what
the run measured about itself, ``parathink.rundir.timings``). So two runs of the same config, seed and inputs into
two directories publish the same hash (docs/reliability.md, "What is hashed and why").

A manifest that cannot be read as one (not JSON, not an object, a key missing or of the wrong type, an output
path that leaves its folder) raises ``ManifestDamaged``; the run directory treats it as no output at all. So does one
that disagrees with itself: a ``version`` this code does not write, or an ``outputs`` table whose SHA-256s do not
combine to its ``output_hash`` (``outputs: {}`` checked no file at all, and an edited output passed as up to date).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from parathink.jsonl import parse_object
from parathink.redact import recordable, redact
from parathink.rundir.timings import TIMINGS
from parathink.storage import StorageError, safe_join
from parathink.storage.digest import file_sha256, local_meta  # noqa: F401  (file_sha256: re-exported)

MANIFEST = "_manifest.json"
GATES = "_gates"  # the gate's report and data docs (pipeline/gating.py): published with, not hashed as, output
# Keys outside a stage's own section that change what any stage produces. A stage may narrow or extend this
# (StageSpec.shared_keys, stages/contract.py).
DEFAULT_SHARED_KEYS = ("model", "data", "format", "seed")
_REQUIRED = {"stage": str, "config_hash": str, "config": dict, "inputs": dict, "output_hash": str, "outputs": dict}
VERSION = 2  # what to_json writes; a manifest of another version is not read (the stage runs again)


class ManifestDamaged(ValueError):
    """A ``_manifest.json`` that is not a manifest; the message says what is wrong with it."""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def stage_config(cfg: DictConfig, stage: str, shared_keys: tuple[str, ...]) -> dict:
    """The part of the config a stage depends on, resolved as it may be recorded: its own section, the module
    that runs it when ``stage_modules`` names one, and the shared keys."""
    rec = recordable(cfg)
    out = {"stage": OmegaConf.to_container(rec[stage], resolve=True)}
    if isinstance(out["stage"], dict):
        # Gate thresholds judge the output, they do not make it: a new threshold re-evaluates the gate on the
        # published output (recorded under the manifest's ``gates``) instead of recomputing the stage.
        out["stage"].pop("gate", None)
    module = (cfg.get("stage_modules") or {}).get(stage)
    if module is not None:
        out["module"] = str(module)
    for key in shared_keys:
        if key in rec:
            node = rec[key]
            out[key] = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return redact(out)


def config_hash(section: dict) -> str:
    return hashlib.sha256(_canonical(section).encode()).hexdigest()[:16]


def tree_hashes(root: Path) -> tuple[str, dict[str, dict]]:
    """(hash of the whole tree, {relative path: {sha256, size, mtime_ns}}) for every file but the manifest, the
    gate's report and the timings."""
    files: dict[str, dict] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in (MANIFEST, TIMINGS) and not rel.startswith(f"{GATES}/"):
            files[rel] = local_meta(p)
    return combined_hash(files), files


def combined_hash(outputs: dict[str, dict]) -> str:
    """The output hash of a table {relative path: {sha256, ...}}: what ``output_hash`` must equal."""
    return hashlib.sha256(_canonical({k: v["sha256"] for k, v in outputs.items()}).encode()).hexdigest()[:16]


def _check(data: dict) -> None:
    for key, kind in _REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise ManifestDamaged(f"{key!r} is missing or not a {kind.__name__}")
    if not all(isinstance(h, (str, type(None))) for h in data["inputs"].values()):
        raise ManifestDamaged("'inputs' must map stages to output hashes")
    if not isinstance(data.get("external", {}), dict):
        raise ManifestDamaged("'external' is not an object")
    if not isinstance(data.get("gates") or {}, dict):
        raise ManifestDamaged("'gates' is not an object")
    if not isinstance(data.get("origin") or {}, dict):
        raise ManifestDamaged("'origin' is not an object")
    for rel, meta in {**data["outputs"], **data.get("external", {})}.items():
        if not isinstance(meta, dict):
            raise ManifestDamaged(f"the record of {rel!r} is not an object")
    for rel, meta in data["outputs"].items():
        if not isinstance(meta.get("size"), int) or not isinstance(meta.get("sha256"), str):
            raise ManifestDamaged(f"output {rel!r} has no size and sha256")
        try:
            safe_join(".", rel)
        except StorageError:
            raise ManifestDamaged(f"output path {rel!r} leaves the stage's folder") from None
    # Checked against itself before it is trusted: the table is what damaged_files compares the folder with, the
    # hash what the next stage records; the two must describe the same files.
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        raise ManifestDamaged(f"version {data.get('version')!r} is not {VERSION}")
    if combined_hash(data["outputs"]) != data["output_hash"]:
        raise ManifestDamaged(f"its outputs table ({len(data['outputs'])} files) does not combine to its output_hash "
                              f"{data['output_hash']!r}")


@dataclass
class Manifest:
    stage: str
    config_hash: str
    config: dict
    inputs: dict[str, str | None]  # input stage -> its output hash when read (None: absent)
    output_hash: str = ""
    outputs: dict[str, dict] = field(default_factory=dict)
    external: dict[str, dict] = field(default_factory=dict)  # a file read from outside the run dir -> fingerprint
    metrics: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    duration_s: float = 0.0
    mlflow_run_id: str | None = None
    gates: dict | None = None  # the quality gate's verdict (parathink.quality.expectations.Verdict.to_record)
    # Where a stage cache hit came from (parathink.rundir.cache): {run_dir: the run that produced the output,
    # key: its cache key}; None for an output produced in its own run directory.
    origin: dict | None = None
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        try:
            data = parse_object(text)
        except ValueError as err:
            raise ManifestDamaged(str(err)) from None
        _check(data)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def finish(self, out_dir: Path, metrics: dict[str, float]) -> None:
        self.output_hash, self.outputs = tree_hashes(out_dir)
        self.metrics = {k: float(v) for k, v in (metrics or {}).items()}
        self.finished_at = time.time()
        self.duration_s = round(self.finished_at - self.started_at, 3)

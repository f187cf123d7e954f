"""One run directory, local or ``s3://``: published stage outputs, their manifests, scratch and temp space.

Layout (``<root>`` is ``run_dir``)::

    <root>/run.json                 the run: experiment, MLflow parent run id, per-stage status
    <root>/<stage>/...              a stage's published outputs, ending with _manifest.json
    <local>/.work/<stage>/          the stage's persistent scratch (checkpoints: a killed stage resumes)
    <local>/.tmp/<stage>/           where ``run`` writes before the output is published

``<local>`` is ``<root>`` for a local run directory and a cache folder for an S3 one (scratch and temp
space must be local disk; inputs are downloaded there on demand). Publishing is atomic: locally, the
finished temp folder (manifest included) is renamed into place; on S3, every file is uploaded, then the
manifest last, after the old manifest was deleted first, so a reader that trusts manifests never sees a
partial output as complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from parathink import storage
from parathink.stages.manifest import MANIFEST, Manifest


class RunDir:
    def __init__(self, root: str, cache_dir: str | Path | None = None, process_rank: int = 0):
        self.root = root.rstrip("/") if storage.is_s3(root) else str(Path(root).resolve())
        if storage.is_s3(root):
            tag = hashlib.sha256(self.root.encode()).hexdigest()[:12]
            base = Path(cache_dir or Path.home() / ".cache" / "parathink" / "runs")
            self.local = (base / tag).resolve()
        else:
            self.local = Path(self.root)
        self.local.mkdir(parents=True, exist_ok=True)
        # The processes of one multi-process launch download an S3 input each into its own folder: no two
        # ever write or replace the same files.
        self.inputs = self.local / ("inputs" if process_rank == 0 else f"inputs.rank{process_rank}")

    @property
    def remote(self) -> bool:
        return storage.is_s3(self.root)

    # ------------------------------------------------------------ paths
    def stage_uri(self, stage: str) -> str:
        return storage.join(self.root, stage)

    def work_dir(self, stage: str) -> Path:
        path = self.local / ".work" / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def fresh_tmp(self, stage: str) -> Path:
        """An empty temp output folder (leftovers of a killed attempt are discarded: never published)."""
        path = self.local / ".tmp" / stage
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    # ------------------------------------------------------------ manifests
    def manifest(self, stage: str) -> Manifest | None:
        uri = storage.join(self.stage_uri(stage), MANIFEST)
        if not storage.exists(uri):
            return None
        return Manifest.from_json(storage.read_text(uri))

    def output_hash(self, stage: str) -> str | None:
        m = self.manifest(stage)
        return m.output_hash if m else None

    def outputs_intact(self, m: Manifest) -> bool:
        """Every file the manifest lists is present with its size (cheap; hashes are checked on demand)."""
        if self.remote:
            return set(m.outputs) <= set(storage.list_files(self.stage_uri(m.stage)))
        root = Path(self.stage_uri(m.stage))
        return all((root / rel).is_file() and (root / rel).stat().st_size == meta["size"]
                   for rel, meta in m.outputs.items())

    # ------------------------------------------------------------ inputs
    def resolve_input(self, stage: str) -> Path:
        """Local folder with ``stage``'s published outputs (downloaded once when the run dir is on S3)."""
        if not self.remote:
            return Path(self.stage_uri(stage))
        dest = self.inputs / stage
        m = self.manifest(stage)
        if m is None:
            return dest / "__absent__"
        cached = dest / MANIFEST
        if not (cached.exists() and Manifest.from_json(cached.read_text()).output_hash == m.output_hash):
            part = dest.with_name(dest.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            storage.download_dir(self.stage_uri(stage), part)
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(part, dest)
        return dest

    # ------------------------------------------------------------ publish
    def publish(self, stage: str, tmp: Path, manifest: Manifest) -> Path:
        """Publish ``tmp`` as ``stage``'s output; returns a local folder holding the published files."""
        (tmp / MANIFEST).write_text(manifest.to_json())
        if self.remote:
            uri = self.stage_uri(stage)
            storage.remove_tree(uri)  # the old manifest goes first: the old output stops counting
            storage.upload_dir(tmp, uri, last=(MANIFEST,))
            return tmp  # the caller logs from it, then discards it
        final = Path(self.stage_uri(stage))
        trash = self.local / ".tmp" / f"{stage}.old-{time.time_ns()}"
        if final.exists():
            os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
        return final

    # ------------------------------------------------------------ run.json
    def read_run(self) -> dict:
        uri = storage.join(self.root, "run.json")
        return json.loads(storage.read_text(uri)) if storage.exists(uri) else {}

    def write_run(self, data: dict) -> None:
        storage.write_text(storage.join(self.root, "run.json"), json.dumps(data, indent=1, sort_keys=True))

"""One run directory, local or ``s3://``: published stage outputs, their manifests, scratch and temp space.

Layout (``<root>`` is ``run_dir``)::

    <root>/run.json                 the run: experiment, MLflow parent run id, per-stage status
    <root>/<stage>/...              a stage's published outputs, ending with _manifest.json
    <root>/.locks/<stage>.lock      held while a process runs the stage (parathink.rundir.lock)
    <local>/.work/<stage>/          the stage's persistent scratch (checkpoints: a killed stage resumes)
    <local>/.tmp/<stage>/           where ``run`` writes before the output is published

``<local>`` is ``<root>`` for a local run directory and a cache folder for an S3 one (scratch and temp
space must be local disk; inputs are downloaded there on demand). No folder or file of these is created, written,
read as an output or removed through a symlink that leads out of ``<local>`` (``parathink.rundir.confine``): it is
refused in one line, exit 2. Publishing is atomic: locally, the
finished temp folder (manifest included) is renamed into place; on S3, the old manifest is deleted first, then
every file is uploaded, then the manifest last, recording each object's ETag, so a reader that trusts manifests
never sees a partial output as complete.

What a manifest says is checked, not trusted (docs/reliability.md): ``damaged_files`` compares the published
files with it (size and mtime locally, rehashing a file whose mtime moved; the ETag on S3), ``stale_reason``
follows a stage's recorded inputs through the whole chain, and a manifest that cannot be read counts as no
output, with a warning naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from parathink import storage
from parathink.errors import StageInputStale, Unavailable
from parathink.jsonl import parse_object
from parathink.logs import log
from parathink.rundir import provenance
from parathink.rundir.confine import inside
from parathink.rundir.lock import LOCKS, StageLock, check_name
from parathink.rundir.manifest import GATES, MANIFEST, Manifest, ManifestDamaged
from parathink.storage import digest


def warn(msg: str) -> None:
    log(f"warning: {msg}")


class RunDir:
    def __init__(self, root: str, cache_dir: str | Path | None = None, process_rank: int = 0):
        root = str(root)
        try:
            storage.check_uri(root)
        except storage.StorageError as err:
            raise storage.StorageError(f"run_dir: {err}") from None
        self.root = root.rstrip("/") if storage.is_s3(root) else str(Path(root).resolve())
        if storage.is_s3(root):
            tag = hashlib.sha256(self.root.encode()).hexdigest()[:12]
            base = Path(cache_dir or Path.home() / ".cache" / "parathink" / "runs")
            self.local = (base / tag).resolve()
        else:
            self.local = Path(self.root)
        try:
            self.local.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            where = "run_dir" if not self.remote else "cache_dir (the S3 run's local scratch)"
            raise storage.StorageError(f"{where}: cannot use {self.local} as a folder "
                                       f"({err.strerror or err})") from None
        # The processes of one multi-process launch download an S3 input each into its own folder: no two
        # ever write or replace the same files.
        self.inputs = self.local / ("inputs" if process_rank == 0 else f"inputs.rank{process_rank}")
        self._warned: set[str] = set()

    @property
    def remote(self) -> bool:
        return storage.is_s3(self.root)

    def probe(self) -> None:
        """Fail now, in one line, when the run directory cannot be written (a read-only folder, no such bucket)."""
        if self.remote:
            storage.exists(storage.join(self.root, "run.json"))  # raises naming the bucket when it is missing
            return
        inside(self.local, self.local / LOCKS)
        try:
            (self.local / LOCKS).mkdir(exist_ok=True)
            probe = self.local / LOCKS / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise storage.StorageError(f"run_dir: {self.root} is not writable ({err.strerror or err})") from None

    # ------------------------------------------------------------ paths
    def stage_uri(self, stage: str) -> str:
        return storage.join(self.root, stage)

    def scratch(self, *parts: str) -> Path:
        """``<local>/<parts...>``, refused when a symlink on it leads out of the run directory."""
        return inside(self.local, self.local.joinpath(*parts))

    def work_dir(self, stage: str) -> Path:
        path = self.scratch(".work", check_name(stage))
        path.mkdir(parents=True, exist_ok=True)
        return inside(self.local, path)  # made now: a symlink placed meanwhile is seen before anything is written

    def fresh_tmp(self, stage: str) -> Path:
        """An empty temp output folder (leftovers of a killed attempt are discarded: never published)."""
        path = self.scratch(".tmp", stage)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return inside(self.local, path)

    def stage_dir(self, stage: str) -> Path:
        """A local run directory's output folder of ``stage``, refused when it leads out of the run directory."""
        return self.scratch(check_name(stage))

    def lock(self, stage: str) -> StageLock:
        return StageLock(self.root, stage)

    # ------------------------------------------------------------ manifests
    def _damaged(self, where: str, why: str) -> None:
        if where not in self._warned:
            self._warned.add(where)
            warn(f"{where} is damaged ({why}); counted as not published, the stage runs again")

    def manifest(self, stage: str) -> Manifest | None:
        """The stage's published manifest; None when there is none, or when it cannot be read as one."""
        uri = storage.join(self.stage_uri(stage), MANIFEST)
        if not self.remote:
            inside(self.local, Path(uri))
        if not storage.exists(uri):
            return None
        try:
            m = Manifest.from_json(storage.read_bytes(uri))
        except ManifestDamaged as err:
            self._damaged(uri, str(err))
            return None
        if m.stage != stage:  # a manifest copied from another stage's folder describes other files
            self._damaged(uri, f"it is the manifest of stage {m.stage!r}")
            return None
        return m

    def output_hash(self, stage: str) -> str | None:
        m = self.manifest(stage)
        return m.output_hash if m else None

    def gate_failed(self, stage: str) -> bool:
        """Whether ``stage``'s published output carries a gate verdict that did not pass."""
        m = self.manifest(stage)
        return bool(m and m.gates and m.gates.get("passed") is False)

    def gate_failed_upstream(self, stage: str, _seen: set | None = None) -> str | None:
        """The first stage at or above ``stage`` in its input chain whose output did not pass its gate; None if none."""
        seen = set() if _seen is None else _seen
        if stage in seen:
            return None
        seen.add(stage)
        m = self.manifest(stage)
        if m is None:
            return None
        if m.gates and m.gates.get("passed") is False:
            return stage
        return next((found for inp in m.inputs if (found := self.gate_failed_upstream(inp, seen))), None)

    def damaged_files(self, m: Manifest) -> list[str]:
        """The files the manifest lists that are missing or whose content is not what was published."""
        return digest.changed(self.stage_uri(m.stage), m.outputs)

    def stale_reason(self, stage: str, _seen: dict | None = None) -> str | None:
        """Why ``stage``'s published output is out of date with its inputs, through the whole chain; None if not.

        An input stage counts as changed when its current output hash differs from the one recorded, or when it is
        itself out of date; a file read from outside the run directory, when its fingerprint differs.
        """
        seen = {} if _seen is None else _seen
        if stage in seen:
            return seen[stage]
        seen[stage] = None  # a cycle (a corrupt record) ends here
        m = self.manifest(stage)
        why = None
        if m is not None:
            for inp, recorded in m.inputs.items():
                if self.output_hash(inp) != recorded:
                    why = f"its input {inp!r} was republished since it ran"
                elif self.gate_failed(inp):
                    why = f"its input {inp!r} did not pass its quality gate"
                elif (deeper := self.stale_reason(inp, seen)) is not None:
                    why = f"its input {inp!r} is out of date: {deeper}"
                if why:
                    break
            changed = None if why else provenance.changed(m.external)
            if changed:
                why = f"its input file {changed} changed since it ran"
        seen[stage] = why
        return why

    def check_input(self, stage: str) -> None:
        """Raise StageInputStale when ``stage``'s published output may not be consumed (altered or out of date)."""
        m = self.manifest(stage)
        if m is None:
            return  # absent: the caller reports it (StageInputMissing)
        bad = self.damaged_files(m)
        if bad:
            raise StageInputStale(f"the published output of {stage!r} ({self.stage_uri(stage)}) was altered after "
                                  f"it was published: {', '.join(bad[:3])}; run `parathink stage {stage}` again")
        failed = self.gate_failed_upstream(stage)
        if failed:
            from parathink.quality import GateFailed

            made = "" if failed == stage else f", and {stage!r} was made from it"
            raise GateFailed(f"the output of {failed!r} did not pass its quality gate{made} (report: "
                             f"{self.stage_uri(failed)}/{GATES}/report.json); fix its config and run `parathink "
                             f"stage {failed}` again")
        why = self.stale_reason(stage)
        if why:
            raise StageInputStale(f"the output of {stage!r} is out of date ({why}); run `parathink stage {stage}` "
                                  f"first")

    # ------------------------------------------------------------ inputs
    def resolve_input(self, stage: str) -> Path:
        """Local folder with ``stage``'s published outputs (downloaded once when the run dir is on S3)."""
        if not self.remote:
            return self.stage_dir(stage)
        dest = self.scratch(self.inputs.name, check_name(stage))
        m = self.manifest(stage)
        if m is None:
            return dest / "__absent__"
        if _cached_hash(dest) != m.output_hash:
            self._download(stage, m, dest)
        return dest

    def _download(self, stage: str, m: Manifest, dest: Path) -> None:
        """Download into a folder of this process's own, check every byte against the manifest, then swap it in:
        concurrent readers never share a temp folder, and a file replaced mid-download is never used."""
        part = dest.with_name(f"{dest.name}.part-{uuid.uuid4().hex[:8]}")
        try:
            storage.download_dir(self.stage_uri(stage), part)
            wrong = [rel for rel, meta in m.outputs.items()
                     if not (part / rel).is_file() or digest.file_sha256(part / rel) != meta["sha256"]]
            if wrong or _cached_hash(part) != m.output_hash:
                raise Unavailable(f"{self.stage_uri(stage)}: its files changed while they were downloaded "
                                  f"({', '.join(wrong[:3]) or MANIFEST}); a retry reads them again")
            trash = dest.with_name(f"{dest.name}.old-{uuid.uuid4().hex[:8]}")
            if dest.exists():
                os.replace(dest, trash)
            try:
                os.replace(part, dest)
            except OSError:  # another process installed the same output first
                pass
            shutil.rmtree(trash, ignore_errors=True)
        finally:
            shutil.rmtree(part, ignore_errors=True)

    # ------------------------------------------------------------ publish
    def publish(self, stage: str, tmp: Path, manifest: Manifest) -> Path:
        """Publish ``tmp`` as ``stage``'s output; returns a local folder holding the published files."""
        if self.remote:
            return self._publish_s3(stage, tmp, manifest)
        final = self.stage_dir(stage)
        trash = self.scratch(".tmp", f"{stage}.old-{uuid.uuid4().hex[:8]}")
        (inside(self.local, tmp) / MANIFEST).write_text(manifest.to_json())
        if final.exists():
            os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
        return final

    def _publish_s3(self, stage: str, tmp: Path, manifest: Manifest) -> Path:
        uri = self.stage_uri(stage)
        storage.remove_file(storage.join(uri, MANIFEST))  # the old manifest first: the old output stops counting
        storage.remove_tree(uri)
        storage.upload_dir(tmp, uri, skip=(MANIFEST,))
        stored = storage.stat_files(uri)
        for rel, meta in manifest.outputs.items():
            if stored.get(rel, {}).get("size") != meta["size"]:
                raise Unavailable(f"{storage.join(uri, rel)}: changed while it was published; a retry publishes again")
            meta.pop("mtime_ns", None)  # the temp copy's; S3's own checksum stands for the bytes from now on
            meta["etag"] = stored[rel]["etag"]
        (tmp / MANIFEST).write_text(manifest.to_json())
        storage.write_bytes(storage.join(uri, MANIFEST), (tmp / MANIFEST).read_bytes())
        return tmp  # the caller logs from it, then discards it

    def publish_gates(self, stage: str, gate_dir: Path, manifest: Manifest) -> None:
        """Replace the published ``_gates/`` of ``stage`` with ``gate_dir`` and rewrite its manifest (whose ``gates``
        changed); the outputs and their hashes stay as published. The caller holds the stage's lock."""
        uri = self.stage_uri(stage)
        if self.remote:
            storage.remove_tree(storage.join(uri, GATES))
            storage.upload_dir(gate_dir, storage.join(uri, GATES))
            storage.write_text(storage.join(uri, MANIFEST), manifest.to_json())
            return
        final = self.stage_dir(stage)
        staged = inside(self.local, final / f".{GATES}.new-{uuid.uuid4().hex[:8]}")
        inside(self.local, final / GATES)
        shutil.copytree(gate_dir, staged)
        trash = self.scratch(".tmp", f"{stage}.{GATES}.old-{uuid.uuid4().hex[:8]}")
        if (final / GATES).exists():
            os.replace(final / GATES, trash)
        os.replace(staged, final / GATES)
        shutil.rmtree(trash, ignore_errors=True)
        tmp = final / f".{MANIFEST}.new-{uuid.uuid4().hex[:8]}"
        tmp.write_text(manifest.to_json())
        os.replace(tmp, final / MANIFEST)

    # ------------------------------------------------------------ run.json
    def read_run(self) -> dict:
        uri = storage.join(self.root, "run.json")
        if not storage.exists(uri):
            return {}
        try:
            return parse_object(storage.read_bytes(uri))
        except ValueError as err:
            if uri not in self._warned:
                self._warned.add(uri)
                warn(f"{uri} is damaged ({err}); started afresh")
            return {}

    def write_run(self, data: dict) -> None:
        storage.write_text(storage.join(self.root, "run.json"), json.dumps(data, indent=1, sort_keys=True))

    def update_run(self, change: Callable[[dict], None]) -> dict:
        """Read run.json, apply ``change``, write it back, all under the run's lock: processes running other
        stages of the same run at the same time each keep their own updates."""
        lock = StageLock(self.root, "_run", label="run.json")
        lock.acquire(wait_s=120)
        try:
            meta = self.read_run()
            change(meta)
            self.write_run(meta)
        finally:
            lock.release()
        return meta


def _cached_hash(folder: Path) -> str | None:
    """The output hash of the manifest in a downloaded folder; None when absent or damaged."""
    try:
        return Manifest.from_json((folder / MANIFEST).read_bytes()).output_hash
    except (OSError, ManifestDamaged):
        return None

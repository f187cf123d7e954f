"""The stage cache: published stage outputs shared across run directories (``stage_cache``, docs/reliability.md).

A content-addressed store, a local folder or an ``s3://`` prefix::

    <store>/<stage>/<family>/<key>/...              the output as published: its files, _gates/, _timings.json
    <store>/<stage>/<family>/<key>/_manifest.json   the producer's manifest, with ``origin``; written last

Everything that decides an output's content enters its key, the run directory's path never does:

- ``family``: the stage's name, its config hash (its section and the shared keys it reads, as the up-to-date check
  computes it), the seed and parathink's version, all known before the stage runs;
- ``key``: the family with what the stage read while it ran, its inputs' output hashes (``ctx.input``) and the
  content of the files it read from outside the run directory (``provenance``).

Which inputs a stage reads is known only once it has run, so a lookup lists the family's entries and takes the one
whose recorded inputs this run directory holds now, each consumable and with the recorded output hash, and whose
external files still have the recorded content: the test ``RunDir.stale_reason`` applies to a stage's own manifest.
An entry is written to a temporary folder and renamed into place (locally), or uploaded with its manifest last, the
old manifest deleted first (S3, as ``RunDir`` publishes): a reader never takes a partial entry for a whole one.
Every file of an entry is checked against its manifest's SHA-256 before it is published into a run directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import parathink
from parathink import storage
from parathink.errors import StageInputStale
from parathink.quality import GateFailed
from parathink.rundir import provenance
from parathink.rundir.manifest import MANIFEST, Manifest, ManifestDamaged, tree_hashes


class EntryDamaged(ValueError):
    """A cache entry whose files or manifest are not what its key says; the message names what is wrong."""


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def family(stage: str, chash: str, seed: int) -> str:
    """What decides a stage's output before it runs (its inputs aside)."""
    return _digest({"stage": stage, "config_hash": chash, "seed": int(seed), "version": parathink.__version__})


def entry_key(family_: str, inputs: dict[str, str | None], external: dict[str, dict]) -> str:
    """The family with what the stage read: its inputs' output hashes, its external files' content (the SHA-256
    locally, the ETag on S3; not the mtime, which a copy of the same bytes does not keep)."""
    content = {uri: {rel: [meta.get("sha256") or meta.get("etag"), meta.get("size")] for rel, meta in files.items()}
               for uri, files in external.items()}
    return _digest({"family": family_, "inputs": inputs, "external": content})


@dataclass(frozen=True)
class Hit:
    key: str
    entry: Manifest  # the producer's manifest, ``origin`` set

    @property
    def produced_by(self) -> str:
        return str((self.entry.origin or {}).get("run_dir"))


class StageCache:
    def __init__(self, root: str):
        root = str(root)
        storage.check_uri(root)
        self.root = root.rstrip("/") if storage.is_s3(root) else str(Path(root).resolve())

    @classmethod
    def from_config(cls, cfg) -> StageCache | None:
        where = cfg.get("stage_cache")
        return cls(str(where)) if where else None

    def probe(self) -> None:
        """Fail now, in one line, when the store cannot be used (a file in the way, a read-only folder, no bucket):
        whoever set ``stage_cache`` expects it to be used, not warned about stage after stage."""
        if storage.is_s3(self.root):
            storage.exists(self._uri(MANIFEST))  # raises naming the bucket when it is missing or unreachable
            return
        try:
            Path(self.root).mkdir(parents=True, exist_ok=True)
            probe = Path(self.root) / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise storage.StorageError(f"stage_cache: {self.root} is not a writable folder "
                                       f"({err.strerror or err})") from None

    def _uri(self, *parts: str) -> str:
        return storage.join(self.root, *parts)

    # ------------------------------------------------------------ write
    def store(self, folder: Path, manifest: Manifest, run_dir: str) -> str:
        """Store the published output in ``folder`` (the manifest ``manifest``, made in ``run_dir``); returns its
        key. An entry already there is replaced: same key, same inputs, so another valid output of them."""
        fam = family(manifest.stage, manifest.config_hash, manifest.seed)
        key = entry_key(fam, manifest.inputs, manifest.external)
        record = Manifest(**{**asdict(manifest), "origin": manifest.origin or {"run_dir": run_dir, "key": key}})
        if storage.is_s3(self.root):
            uri = self._uri(manifest.stage, fam, key)
            storage.remove_file(storage.join(uri, MANIFEST))  # first: the old entry stops counting
            storage.remove_tree(uri)
            storage.upload_dir(folder, uri, skip=(MANIFEST,))
            storage.write_text(storage.join(uri, MANIFEST), record.to_json())
            return key
        parent = Path(self._uri(manifest.stage, fam))
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".{key}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(folder, tmp, ignore=lambda where, names: [MANIFEST] if Path(where) == Path(folder) else [])
            (tmp / MANIFEST).write_text(record.to_json())
            final, trash = parent / key, parent / f".{key}.old-{uuid.uuid4().hex[:8]}"
            if final.exists():
                os.replace(final, trash)
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return key

    def holds(self, manifest: Manifest) -> bool:
        fam = family(manifest.stage, manifest.config_hash, manifest.seed)
        key = entry_key(fam, manifest.inputs, manifest.external)
        return storage.exists(self._uri(manifest.stage, fam, key, MANIFEST))

    # ------------------------------------------------------------ read
    def _keys(self, stage: str, fam: str) -> list[str]:
        uri = self._uri(stage, fam)
        if storage.is_s3(self.root):
            rels = storage.list_files(uri)
            return sorted({r.split("/")[0] for r in rels if r.count("/") == 1 and r.endswith(f"/{MANIFEST}")})
        path = Path(uri)
        if not path.is_dir():
            return []
        return sorted(p.name for p in path.iterdir() if not p.name.startswith(".") and (p / MANIFEST).is_file())

    def _entry(self, stage: str, fam: str, key: str) -> Manifest:
        try:
            m = Manifest.from_json(storage.read_bytes(self._uri(stage, fam, key, MANIFEST)))
        except ManifestDamaged as err:
            raise EntryDamaged(f"its manifest is damaged ({err})") from None
        if m.stage != stage or family(m.stage, m.config_hash, m.seed) != fam or \
                entry_key(fam, m.inputs, m.external) != key:
            raise EntryDamaged("its manifest describes another output than its key")
        return m

    def lookup(self, stage: str, chash: str, seed: int, rundir, warn) -> Hit | None:
        """The entry whose recorded inputs ``rundir`` holds now, with the external files it read unchanged; None when
        there is none. A damaged entry is skipped with ``warn``."""
        fam = family(stage, chash, seed)
        for key in self._keys(stage, fam):
            try:
                m = self._entry(stage, fam, key)
            except EntryDamaged as err:
                warn(f"stage cache entry {self._uri(stage, fam, key)} is not used ({err})")
                continue
            if _inputs_hold(m, rundir):
                return Hit(key, m)
        return None

    def fetch(self, hit: Hit, dest: Path) -> None:
        """Copy the entry into the empty local folder ``dest``, every file checked against the entry's manifest;
        EntryDamaged names the files that are not what it says. ``hit.entry``'s outputs become those of ``dest``."""
        m = hit.entry
        storage.download_dir(self._uri(m.stage, family(m.stage, m.config_hash, m.seed), hit.key), dest)
        output_hash, outputs = tree_hashes(dest)
        recorded = {rel: meta["sha256"] for rel, meta in m.outputs.items()}
        wrong = sorted(rel for rel in set(recorded) | set(outputs)
                       if recorded.get(rel) != outputs.get(rel, {}).get("sha256"))
        if wrong or output_hash != m.output_hash:
            raise EntryDamaged(f"{', '.join(wrong[:3]) or 'its output hash'} not what its manifest says")
        m.outputs = outputs  # this copy's sizes and mtimes, the same SHA-256s


def _inputs_hold(m: Manifest, rundir) -> bool:
    """Whether the inputs ``m`` was made from are what ``rundir`` would give the stage now (``ctx.input``'s checks)."""
    for inp, recorded in m.inputs.items():
        if rundir.output_hash(inp) != recorded:
            return False
        if recorded is not None:
            try:
                rundir.check_input(inp)
            except (StageInputStale, GateFailed):
                return False
    return provenance.changed(m.external) is None

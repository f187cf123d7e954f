"""Content fingerprints of files at a local path or under an s3:// URI, and the check that they still hold.

A fingerprint is ``{relative path: meta}`` (``""`` for a single file). Locally ``meta`` is the SHA-256, the size
and the mtime; on S3 the ETag and the size (the ETag is S3's own content checksum of what it stores, so checking it
costs one listing, no download). ``changed`` is cheap where it can be: a local file whose size and mtime match its
record is not read again; one whose mtime moved is rehashed, so a ``touch`` is not a change but a same-size edit is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from parathink.storage.uri import is_s3, s3_client, s3_errors, safe_join, split_uri, stat_files


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def local_meta(path: Path, sha256: str | None = None) -> dict:
    st = path.stat()
    return {"sha256": sha256 or file_sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stat(uri: str) -> dict[str, dict]:
    """Size and mtime (local) or ETag (S3) of the file at ``uri`` or of every file under it; no content read."""
    if not is_s3(uri):
        path = Path(uri)
        if path.is_file():
            st = path.stat()
            return {"": {"size": st.st_size, "mtime_ns": st.st_mtime_ns}}
        return stat_files(path)
    bucket, key = split_uri(uri)
    if key and not key.endswith("/"):
        try:
            head = s3_client().head_object(Bucket=bucket, Key=key)
            return {"": {"size": head["ContentLength"], "etag": head["ETag"].strip('"')}}
        except Exception:  # not a single object: a prefix (or nothing), listed below
            pass
    return stat_files(uri)


def fingerprint(uri: str | Path) -> dict[str, dict]:
    """What ``changed`` later compares against: every file at or under ``uri`` (content hashed locally)."""
    uri = str(uri)
    stats = _stat(uri)
    if is_s3(uri):
        return stats
    root = Path(uri)
    return {rel: local_meta(root if rel == "" else safe_join(root, rel)) for rel in stats}


def changed(uri: str | Path, recorded: dict[str, dict], exact: bool = False) -> list[str]:
    """The recorded files that are missing or whose content differs (``exact``: files added count too)."""
    uri = str(uri)
    with s3_errors(uri, "check"):
        now = _stat(uri)
    out = sorted(set(now) - set(recorded)) if exact else []
    for rel, meta in recorded.items():
        cur = now.get(rel)
        if cur is None or ("size" in meta and cur["size"] != meta["size"]):
            out.append(rel)
        elif "etag" in meta and "etag" in cur:
            if cur["etag"] != meta["etag"]:
                out.append(rel)
        elif "sha256" in meta and "mtime_ns" in cur and cur["mtime_ns"] != meta.get("mtime_ns"):
            if file_sha256(Path(uri) if rel == "" else safe_join(uri, rel)) != meta["sha256"]:
                out.append(rel)
    return sorted(set(out))

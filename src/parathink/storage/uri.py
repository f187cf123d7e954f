"""Read, write, list and sync files at a local path or an ``s3://bucket/key`` URI.

Atomicity: a local write goes to a temporary file in the same directory and is renamed over the target
(``os.replace`` is atomic on POSIX), so a reader sees the old file or the new one, never half of it. An S3
``put_object`` is atomic per object by construction; multi-file atomicity (a whole stage output) is the
runner's job: it uploads every file first and writes the manifest last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_S3 = "s3://"


class StorageError(OSError):
    """A storage operation failed; the message names the URI."""


def is_s3(uri: str | Path) -> bool:
    return str(uri).startswith(_S3)


def join(uri: str | Path, *parts: str) -> str:
    """Join path parts onto a local path or an s3:// URI (always with ``/`` for S3)."""
    if is_s3(uri):
        base = str(uri).rstrip("/")
        rest = "/".join(p.strip("/") for p in parts if p)
        return f"{base}/{rest}" if rest else base
    return str(Path(uri).joinpath(*parts))


def _split(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    rest = str(uri)[len(_S3):]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StorageError(f"{uri}: no bucket in the S3 URI")
    return bucket, key


_ENV_KEYS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE")
_clients: dict[tuple, object] = {}


def _client():
    """A boto3 S3 client (boto3 reads endpoint, credentials and region from the environment itself).

    Creating one costs ~0.1 s, so clients are reused for as long as those environment variables stay the same.
    """
    key = tuple(os.environ.get(k) for k in _ENV_KEYS)
    if key not in _clients:
        import boto3

        _clients.clear()
        _clients[key] = boto3.client("s3")
    return _clients[key]


def _missing(err: Exception) -> bool:
    code = getattr(err, "response", {}).get("Error", {}).get("Code", "")
    return code in ("404", "NoSuchKey", "NotFound")


# ---------------------------------------------------------------- single files

def read_bytes(uri: str | Path) -> bytes:
    if not is_s3(uri):
        try:
            return Path(uri).read_bytes()
        except OSError as err:
            raise StorageError(f"{uri}: cannot read ({err.strerror or err})") from err
    bucket, key = _split(str(uri))
    try:
        return _client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as err:  # botocore errors carry the reason in their message
        raise StorageError(f"{uri}: cannot read ({'not found' if _missing(err) else err})") from err


def read_text(uri: str | Path) -> str:
    return read_bytes(uri).decode("utf-8")


def write_bytes(uri: str | Path, data: bytes) -> None:
    """Write ``data`` atomically: readers see the old content or the new one, never a part."""
    if is_s3(uri):
        bucket, key = _split(str(uri))
        try:
            _client().put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as err:
            raise StorageError(f"{uri}: cannot write ({err})") from err
        return
    path = Path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(uri: str | Path, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def exists(uri: str | Path) -> bool:
    """True when ``uri`` is a file, a directory, or (S3) a key or a prefix with keys under it."""
    if not is_s3(uri):
        return Path(uri).exists()
    bucket, key = _split(str(uri))
    client = _client()
    try:
        client.head_object(Bucket=bucket, Key=key)
        return True
    except Exception as err:
        if not _missing(err):
            raise StorageError(f"{uri}: cannot check ({err})") from err
    resp = client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
    return resp.get("KeyCount", 0) > 0


# ---------------------------------------------------------------- trees

def list_files(uri: str | Path) -> list[str]:
    """Relative paths (``/``-separated, sorted) of every file under the directory or prefix ``uri``."""
    if not is_s3(uri):
        root = Path(uri)
        if not root.is_dir():
            return []
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    bucket, key = _split(str(uri))
    prefix = key.rstrip("/") + "/" if key else ""
    out: list[str] = []
    paginator = _client().get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        out.extend(obj["Key"][len(prefix):] for obj in page.get("Contents", []))
    return sorted(out)


def remove_tree(uri: str | Path) -> None:
    """Delete a directory or every key under a prefix; missing is not an error."""
    if not is_s3(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    bucket, key = _split(str(uri))
    client = _client()
    prefix = key.rstrip("/") + "/"
    keys = [prefix + rel for rel in list_files(uri)]
    for i in range(0, len(keys), 1000):  # delete_objects takes at most 1000 keys
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def upload_dir(local: str | Path, uri: str | Path, *, last: tuple[str, ...] = ()) -> list[str]:
    """Copy every file under ``local`` to ``uri`` (S3 or another local dir); return the relative paths.

    Files named in ``last`` are written after all others: a manifest written last marks the upload
    complete, so a reader that trusts only the manifest never sees a partial tree.
    """
    local = Path(local)
    rels = list_files(local)
    ordered = [r for r in rels if r not in last] + [r for r in rels if r in last]
    if is_s3(uri):
        bucket, key = _split(str(uri))
        client = _client()
        for rel in ordered:
            try:
                client.upload_file(str(local / rel), bucket, f"{key.rstrip('/')}/{rel}")
            except Exception as err:
                raise StorageError(f"{join(uri, rel)}: cannot upload ({err})") from err
    else:
        for rel in ordered:
            write_bytes(join(uri, rel), (local / rel).read_bytes())
    return ordered


def download_dir(uri: str | Path, local: str | Path) -> list[str]:
    """Copy every file under ``uri`` into the local directory ``local``; return the relative paths."""
    local = Path(local)
    rels = list_files(uri)
    if is_s3(uri):
        bucket, key = _split(str(uri))
        client = _client()
        for rel in rels:
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.part")
            client.download_file(bucket, f"{key.rstrip('/')}/{rel}", str(tmp))
            os.replace(tmp, dest)
    else:
        for rel in rels:
            write_bytes(local / rel, (Path(uri) / rel).read_bytes())
    return rels

"""Read, write, list and sync files at a local path or an ``s3://bucket/key`` URI.

Atomicity: a local write goes to a temporary file in the same directory and is renamed over the target
(``os.replace`` is atomic on POSIX), so a reader sees the old file or the new one, never half of it. An S3
``put_object`` is atomic per object by construction; multi-file atomicity (a whole stage output) is the
runner's job: it uploads every file first and writes the manifest last.

Containment: every object key becomes a local path through ``safe_join``, which refuses a key that climbs out of
its folder (``../``, a leading ``/``): whoever can write the bucket cannot write elsewhere on this disk.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from parathink.errors import ParathinkError

_S3 = "s3://"
# S3 bucket names (the legacy rules, which also allowed upper case and underscores in us-east-1).
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{1,253}[A-Za-z0-9]")


class StorageError(ParathinkError, OSError):
    """A storage operation failed on the input given (no such bucket, access denied, a bad URI); names the URI."""

    exit_code = 2


class StorageUnavailable(StorageError):
    """S3 could not be reached or answered with a server error: worth a retry."""

    exit_code = 1


def is_s3(uri: str | Path) -> bool:
    return str(uri).startswith(_S3)


def join(uri: str | Path, *parts: str) -> str:
    """Join path parts onto a local path or an s3:// URI (always with ``/`` for S3)."""
    if is_s3(uri):
        base = str(uri).rstrip("/")
        rest = "/".join(p.strip("/") for p in parts if p)
        return f"{base}/{rest}" if rest else base
    return str(Path(uri).joinpath(*parts))


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    rest = str(uri)[len(_S3):]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StorageError(f"{uri}: no bucket in the S3 URI (expected s3://BUCKET/PREFIX)")
    if not _BUCKET.fullmatch(bucket):
        raise StorageError(f"{uri}: {bucket!r} is not a valid S3 bucket name")
    return bucket, key


def check_uri(uri: str) -> None:
    """Raise StorageError when ``uri`` is an s3:// URI without a valid bucket (no network call)."""
    if is_s3(uri):
        split_uri(uri)


def safe_join(root: str | Path, rel: str) -> Path:
    """``root / rel`` for a relative, ``/``-separated path that stays inside ``root``; else StorageError."""
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or "//" in rel or ".." in parts:
        raise StorageError(f"{rel}: refused, the path leaves its folder {root}")
    return Path(root).joinpath(*parts)


_ENV_KEYS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE")
_clients: dict[tuple, object] = {}


def s3_client():
    """A boto3 S3 client (boto3 reads endpoint, credentials and region from the environment itself).

    Creating one costs ~0.1 s, so clients are reused for as long as those environment variables stay the same.
    """
    key = tuple(os.environ.get(k) for k in _ENV_KEYS)
    if key not in _clients:
        import boto3

        _clients.clear()
        _clients[key] = boto3.client("s3")
    return _clients[key]


def error_code(err: Exception) -> str:
    return str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))


def _missing(err: Exception) -> bool:
    return error_code(err) in ("404", "NoSuchKey", "NotFound")


def s3_error(uri: str, action: str, err: Exception) -> StorageError:
    """A botocore error as a one-line StorageError: the input's fault (exit 2) or S3's (retryable)."""
    code = error_code(err)
    if code == "NoSuchBucket":
        return StorageError(f"{uri}: cannot {action} (bucket {split_uri(uri)[0]!r} does not exist)")
    if type(err).__name__ in ("NoCredentialsError", "PartialCredentialsError", "NoRegionError"):
        return StorageError(f"{uri}: cannot {action} ({err}; set AWS_ACCESS_KEY_ID and the rest in the environment)")
    if not code or code.startswith("5") or code in ("SlowDown", "InternalError", "ServiceUnavailable",
                                                    "RequestTimeout"):
        return StorageUnavailable(f"{uri}: cannot {action} (S3 not reachable or failing: {err})")
    return StorageError(f"{uri}: cannot {action} ({'not found' if _missing(err) else err})")


@contextmanager
def s3_errors(uri: str, action: str) -> Iterator[None]:
    try:
        yield
    except StorageError:
        raise
    except Exception as err:  # botocore's errors, of several types, all carry the reason in their message
        raise s3_error(str(uri), action, err) from err


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (os.umask sets it to read it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- single files

def read_bytes(uri: str | Path) -> bytes:
    if not is_s3(uri):
        try:
            return Path(uri).read_bytes()
        except OSError as err:
            raise StorageError(f"{uri}: cannot read ({err.strerror or err})") from err
    bucket, key = split_uri(str(uri))
    with s3_errors(str(uri), "read"):
        return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()


def read_text(uri: str | Path) -> str:
    return read_bytes(uri).decode("utf-8")


def write_bytes(uri: str | Path, data: bytes) -> None:
    """Write ``data`` atomically: readers see the old content or the new one, never a part."""
    if is_s3(uri):
        bucket, key = split_uri(str(uri))
        with s3_errors(str(uri), "write"):
            s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = Path(uri)
    if path.is_dir():
        raise StorageError(f"{path}: cannot write, it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise StorageError(f"{path}: cannot write ({err.strerror or err})") from err
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # what open() would give; mkstemp's 0600 made outputs unreadable to others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, StorageError):
            raise StorageError(f"{path}: cannot write ({err.strerror or err})") from err
        raise


def write_text(uri: str | Path, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def exists(uri: str | Path) -> bool:
    """True when ``uri`` is a file, a directory, or (S3) a key or a prefix with keys under it."""
    if not is_s3(uri):
        return Path(uri).exists()
    bucket, key = split_uri(str(uri))
    client = s3_client()
    try:
        client.head_object(Bucket=bucket, Key=key)
        return True
    except Exception as err:
        if not _missing(err):
            raise s3_error(str(uri), "check", err) from err
    with s3_errors(str(uri), "list"):
        resp = client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
    return resp.get("KeyCount", 0) > 0


# ---------------------------------------------------------------- trees

def list_files(uri: str | Path) -> list[str]:
    """Relative paths (``/``-separated, sorted) of every file under the directory or prefix ``uri``."""
    return sorted(stat_files(uri))


def stat_files(uri: str | Path) -> dict[str, dict]:
    """{relative path: {size, mtime_ns}} locally, {relative path: {size, etag}} on S3 (one listing, no reads)."""
    if not is_s3(uri):
        root = Path(uri)
        if not root.is_dir():
            return {}
        out = {}
        for p in root.rglob("*"):
            if p.is_file():
                st = p.stat()
                out[p.relative_to(root).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        return out
    bucket, key = split_uri(str(uri))
    prefix = key.rstrip("/") + "/" if key else ""
    out = {}
    with s3_errors(str(uri), "list"):
        for page in s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"][len(prefix):]] = {"size": obj["Size"], "etag": obj["ETag"].strip('"')}
    return out


def remove_file(uri: str | Path) -> None:
    """Delete one file or object; missing is not an error."""
    if not is_s3(uri):
        Path(uri).unlink(missing_ok=True)
        return
    bucket, key = split_uri(str(uri))
    with s3_errors(str(uri), "delete"):
        s3_client().delete_object(Bucket=bucket, Key=key)


def remove_tree(uri: str | Path) -> None:
    """Delete a directory or every key under a prefix; missing is not an error."""
    if not is_s3(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    bucket, key = split_uri(str(uri))
    client = s3_client()
    prefix = key.rstrip("/") + "/"
    keys = [prefix + rel for rel in list_files(uri)]
    with s3_errors(str(uri), "delete"):
        for i in range(0, len(keys), 1000):  # delete_objects takes at most 1000 keys
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def upload_dir(local: str | Path, uri: str | Path, *, last: tuple[str, ...] = (),
               skip: tuple[str, ...] = ()) -> list[str]:
    """Copy every file under ``local`` (but those in ``skip``) to ``uri`` (S3 or another local dir); return the
    relative paths.

    Files named in ``last`` are written after all others: a manifest written last marks the upload
    complete, so a reader that trusts only the manifest never sees a partial tree.
    """
    local = Path(local)
    rels = [r for r in list_files(local) if r not in skip]
    ordered = [r for r in rels if r not in last] + [r for r in rels if r in last]
    if is_s3(uri):
        bucket, key = split_uri(str(uri))
        client = s3_client()
        for rel in ordered:
            with s3_errors(join(uri, rel), "upload"):
                client.upload_file(str(local / rel), bucket, f"{key.rstrip('/')}/{rel}")
    else:
        for rel in ordered:
            write_bytes(join(uri, rel), (local / rel).read_bytes())
    return ordered


def download_dir(uri: str | Path, local: str | Path) -> list[str]:
    """Copy every file under ``uri`` into the local directory ``local``; return the relative paths."""
    local = Path(local)
    rels = list_files(uri)
    targets = {rel: safe_join(local, rel) for rel in rels}  # every key checked before anything is written
    if is_s3(uri):
        bucket, key = split_uri(str(uri))
        client = s3_client()
        for rel, dest in targets.items():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.part")
            with s3_errors(join(uri, rel), "download"):
                client.download_file(bucket, f"{key.rstrip('/')}/{rel}", str(tmp))
            os.replace(tmp, dest)
    else:
        for rel, dest in targets.items():
            write_bytes(dest, (Path(uri) / rel).read_bytes())
    return rels

"""Conditional writes on S3: the primitives of a lease (``parathink.rundir.lock``).

S3 applies ``If-None-Match: *`` (create only when absent) and ``If-Match: ETAG`` (replace or delete only the
version read) atomically on the server, so two writers racing for one key cannot both win. Ages are measured on
the server's clock (the ``Date`` of the response against the object's ``LastModified``): machines whose clocks
disagree still agree on whether a lease expired.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime

from parathink.storage.uri import error_code, s3_client, s3_error, split_uri

_LOST = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409", "NoSuchKey", "404")


def _put(uri: str, data: bytes, **condition) -> str | None:
    bucket, key = split_uri(uri)
    try:
        return s3_client().put_object(Bucket=bucket, Key=key, Body=data, **condition)["ETag"].strip('"')
    except Exception as err:
        if error_code(err) in _LOST:
            return None
        raise s3_error(uri, "write", err) from err


def create(uri: str, data: bytes) -> str | None:
    """Write ``uri`` only when no object is there; its ETag, or None when one already was."""
    return _put(uri, data, IfNoneMatch="*")


def replace(uri: str, data: bytes, etag: str) -> str | None:
    """Overwrite ``uri`` only while it is still the version ``etag``; the new ETag, or None when it changed."""
    return _put(uri, data, IfMatch=f'"{etag}"')


def read(uri: str) -> tuple[bytes, str, float] | None:
    """(content, ETag, age in seconds by the server's clock) of ``uri``; None when it does not exist."""
    bucket, key = split_uri(uri)
    try:
        resp = s3_client().get_object(Bucket=bucket, Key=key)
    except Exception as err:
        if error_code(err) in ("NoSuchKey", "404"):
            return None
        raise s3_error(uri, "read", err) from err
    now = parsedate_to_datetime(resp["ResponseMetadata"]["HTTPHeaders"]["date"])
    age = (now - resp["LastModified"]).total_seconds()
    return resp["Body"].read(), resp["ETag"].strip('"'), age


def delete(uri: str, etag: str | None = None) -> bool:
    """Delete ``uri`` (only the version ``etag`` when given); False when it had changed.

    A store without conditional deletes (``NotImplemented``) deletes unconditionally: callers read the object and
    check it is theirs first, so only a change in that instant is missed.
    """
    bucket, key = split_uri(uri)
    try:
        s3_client().delete_object(Bucket=bucket, Key=key, **({"IfMatch": f'"{etag}"'} if etag else {}))
        return True
    except Exception as err:
        if error_code(err) in _LOST:
            return False
        if etag and error_code(err) in ("NotImplemented", "InvalidArgument"):
            return delete(uri)
        raise s3_error(uri, "delete", err) from err

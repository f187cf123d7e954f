"""Local and s3:// artifact URIs: read, write atomically, list, sync a directory up or down.

One small interface for both kinds of location, so that a run directory can be ``runs/tiny`` on a laptop
and ``s3://bucket/parathink/tiny`` on a cluster with no other change. S3 settings (endpoint, credentials,
region) come from the environment only (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), never from a
config file. ``digest`` fingerprints files and checks them later; ``conditional`` holds S3's conditional writes.
"""

from parathink.storage.uri import (
    StorageError,
    StorageUnavailable,
    check_uri,
    download_dir,
    exists,
    is_s3,
    join,
    list_files,
    read_bytes,
    read_text,
    remove_file,
    remove_tree,
    safe_join,
    stat_files,
    upload_dir,
    write_bytes,
    write_text,
)

__all__ = [
    "StorageError",
    "StorageUnavailable",
    "check_uri",
    "download_dir",
    "exists",
    "is_s3",
    "join",
    "list_files",
    "read_bytes",
    "read_text",
    "remove_file",
    "remove_tree",
    "safe_join",
    "stat_files",
    "upload_dir",
    "write_bytes",
    "write_text",
]

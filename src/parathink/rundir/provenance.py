"""Files a stage reads from outside its run directory: recorded, so that a change to them makes the stage stale.

A stage's inputs from the run directory are other stages' manifests; a ``filter.input`` JSONL or a data set's local
or s3:// file is not. Whatever reads such a file calls ``note_read(uri)``; while the runner runs a stage
(``recording``), that records the file's fingerprint (``parathink.storage.digest``: SHA-256 locally, the ETag on
S3) into the stage's manifest (``external``), and ``changed`` later tells which of them no longer match. Outside a
stage run ``note_read`` does nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from parathink.storage import digest

_recording: list[dict[str, dict]] = []  # a stack: the stage being run records into the last one


@contextmanager
def recording() -> Iterator[dict[str, dict]]:
    files: dict[str, dict] = {}
    _recording.append(files)
    try:
        yield files
    finally:
        _recording.remove(files)


def note_read(uri: str) -> None:
    """Record the fingerprint of the file (or folder, or prefix) at ``uri`` for the stage being run."""
    if _recording and str(uri) not in _recording[-1]:
        _recording[-1][str(uri)] = digest.fingerprint(uri)


def changed(recorded: dict[str, dict]) -> str | None:
    """The first recorded URI whose files differ from its fingerprint now (missing, edited, added), or None."""
    for uri, files in recorded.items():
        if digest.changed(uri, files, exact=True):
            return uri
    return None

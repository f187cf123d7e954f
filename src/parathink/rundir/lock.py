"""One process per stage: a stage holds a lock on its output while it runs, in a local run directory and on S3.

Two triggers of one DAG, or a retried pod beside a slow one, must not write the same stage at once (they tear each
other's temp files and publish a manifest that does not describe the files). The lock lives beside the stages, at
``<run_dir>/.locks/<stage>.lock``:

- **local disk** (and NFS, which forwards it): ``flock`` on that file. The kernel drops it when its process dies,
  however it dies, so a local lock is never stale.
- **S3**: a lease object created only if absent (``If-None-Match: *``), renewed every ``ttl_s / 4`` by a heartbeat
  that replaces exactly the version it wrote (``If-Match``). A lease that was not renewed for ``ttl_s`` (its holder
  was killed) is taken over the same way, atomically, so two takers cannot both win. A holder whose lease was
  taken over learns it at its next renewal and refuses to publish (``check``).

A held lock is ``LockHeld`` (exit 1: retry later; the retry finds the stage done and skips it), one line naming the
holder's host, pid, start time and command. ``parathink unlock RUN_DIR STAGE`` breaks a lock whose holder is known
to be gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from parathink import storage
from parathink.errors import BadInput, Unavailable
from parathink.logs import log
from parathink.rundir.confine import inside
from parathink.storage import conditional

LOCKS = ".locks"
# An S3 lease not renewed for this long counts as its holder's death. Four renewals fit in it, and an
# orchestrator's retry after a killed pod (a minute's back-off by default) finds it expired.
LEASE_TTL_S = 60.0


class LockHeld(Unavailable):
    """Another live process runs this stage."""


class LockLost(Unavailable):
    """This process's lease was taken over or broken while it ran: it must not publish."""


# A stage's name as a lock, an output folder and a scratch folder use it: one path segment, never ``..``.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_name(name: str) -> str:
    """``name`` when it can name a stage's files (one path segment: no ``/``, not ``.`` or ``..``); else BadInput."""
    if not _NAME.fullmatch(str(name)) or ".." in str(name):
        raise BadInput(f"stage {name!r}: not a stage name (letters, digits, '_', '-', '.'; no path)")
    return str(name)


def lock_uri(root: str, name: str) -> str:
    return storage.join(root, LOCKS, f"{check_name(name)}.lock")


def known_stage(root: str, name: str) -> None:
    """Raise BadInput unless ``root`` is a run directory with a lock, a published output or scratch for stage
    ``name`` (``_run``: run.json's lock); what ``parathink unlock`` checks before it breaks anything."""
    check_name(name)
    if storage.is_s3(root):
        storage.check_uri(root)
        places = [lock_uri(root, name), storage.join(root, name, "_manifest.json")]
        if not any(storage.exists(p) for p in places):
            raise BadInput(f"{root} has no lock and no published output of stage {name!r}")
        return
    if not Path(root).is_dir():
        raise BadInput(f"run directory {root} does not exist (or is not a folder)")
    base = Path(root)
    inside(base, base / LOCKS / f"{name}.lock")
    if not any(p.exists() for p in (base / LOCKS / f"{name}.lock", base / name, base / ".work" / name)):
        held = sorted(p.stem for p in (base / LOCKS).glob("*.lock")) if (base / LOCKS).is_dir() else []
        raise BadInput(f"{root} has no lock, output or scratch of stage {name!r} (its locks: "
                       f"{', '.join(held) or 'none'})")


def describe(holder: dict | None) -> str:
    if not holder:
        return "another process (no holder recorded)"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since", 0))))
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {since} "
            f"({holder.get('command', '?')})")


def _parse(data: bytes | str) -> dict | None:
    try:
        holder = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return holder if isinstance(holder, dict) else None


class StageLock:
    """``with StageLock(run_dir, stage): ...``; ``check()`` before publishing."""

    def __init__(self, root: str, name: str, ttl_s: float = LEASE_TTL_S, heartbeat: bool = True,
                 label: str | None = None):
        self.root, self.name, self.ttl_s, self.heartbeat = root, name, float(ttl_s), heartbeat
        self.label = label or f"stage {name!r}"
        self.uri = lock_uri(root, name)
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
                       "since": time.time(), "ttl_s": self.ttl_s, "command": " ".join(sys.argv[:3])[:200]}
        self._fd: int | None = None
        self._etag: str | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> StageLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _held(self, holder: dict | None, extra: str = "") -> LockHeld:
        return LockHeld(f"{self.label} of {self.root} is locked by {describe(holder)}{extra}; a retry "
                        f"after it finishes finds the stage done. If that process is gone: "
                        f"parathink unlock {self.root} {self.name}")

    def acquire(self, wait_s: float = 0.0) -> StageLock:
        """Take the lock; wait up to ``wait_s`` for it, then raise LockHeld naming the holder."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                (self._acquire_s3 if storage.is_s3(self.root) else self._acquire_local)()
                return self
            except LockHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    # ------------------------------------------------------------ local: flock
    def _acquire_local(self) -> None:
        path = inside(self.root, self.uri)  # a symlinked .locks or lock file would be truncated and written to
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise storage.StorageError(f"{path}: cannot create the stage lock ({err.strerror or err})") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse(path.read_bytes()) if path.exists() else None
            os.close(fd)
            raise self._held(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder).encode(), 0)
        self._fd = fd

    # ------------------------------------------------------------ S3: a lease
    def _acquire_s3(self) -> None:
        body = json.dumps(self.holder).encode()
        etag = conditional.create(self.uri, body)
        if etag is None:
            current = conditional.read(self.uri)
            if current is None:  # released in between
                etag = conditional.create(self.uri, body)
            else:
                data, old_etag, age = current
                holder = _parse(data)
                ttl = float((holder or {}).get("ttl_s", LEASE_TTL_S))
                if age <= ttl:
                    raise self._held(holder, f", lease renewed {age:.0f} s ago")
                log(f"{self.name}: taking over the lease of {describe(holder)}, not renewed for {age:.0f} s")
                etag = conditional.replace(self.uri, body, old_etag)
            if etag is None:
                current = conditional.read(self.uri)
                raise self._held(_parse(current[0]) if current else None)
        self._etag = etag
        if self.heartbeat:
            self._beat = threading.Thread(target=self._renew, args=(body,), daemon=True, name=f"lease-{self.name}")
            self._beat.start()

    def _renew(self, body: bytes) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self.ttl_s / 4):
            with self._mutex:
                try:
                    etag = conditional.replace(self.uri, body, self._etag)
                except storage.StorageError as err:  # S3 unreachable for a moment: keep trying within the lease
                    if time.monotonic() - last_ok > self.ttl_s:
                        self._lost = f"the lease could not be renewed for {self.ttl_s:.0f} s ({err})"
                        return
                    continue
                if etag is None:
                    self._lost = "the lease was taken over or broken by another process"
                    return
                self._etag, last_ok = etag, time.monotonic()

    # ------------------------------------------------------------ both
    def check(self) -> None:
        """Raise LockLost unless this process still holds the lock (called right before publishing)."""
        why = self._lost
        if why is None and self._fd is not None:
            try:
                same = os.stat(self.uri).st_ino == os.fstat(self._fd).st_ino
            except FileNotFoundError:
                same = False
            why = None if same else "the lock was broken (parathink unlock)"
        elif why is None and self._etag is not None:
            with self._mutex:
                current = conditional.read(self.uri)
                if current is None or current[1] != self._etag:
                    why = "the lease was taken over or broken by another process"
        if why:
            raise LockLost(f"{self.label} of {self.root}: {why}; not publishing (a retry reruns it)")

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if self._etag is not None and self._lost is None:
            conditional.delete(self.uri, self._etag)
        self._etag = None


def break_lock(root: str, name: str) -> dict | None:
    """Remove the lock of ``name`` whoever holds it; returns the holder it named (None when it was free)."""
    uri = lock_uri(root, name)
    if storage.is_s3(root):
        current = conditional.read(uri)
        if current is None:
            return None
        conditional.delete(uri)
        return _parse(current[0]) or {}
    path = inside(root, uri)
    if not path.exists():
        return None
    with path.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            holder = _parse(f.read())
    path.unlink()  # the holder keeps its flock on the old file, and its check() before publishing fails
    return holder or {}

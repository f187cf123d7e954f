"""Fail fast, in one line, when the MLflow tracking store cannot be used.

MLflow's client retries a refused connection for minutes (seven tries with doubling back-off: ``parathink run``
waited 255 s, then printed a traceback; ``promote`` reported the server's silence as a missing model and exited 0).
Before the first MLflow call a run opens one TCP connection with a short timeout and stops with
``TrackingUnavailable`` (exit 1: the server may come back, a retry is the remedy) naming the URI. A store that can
never work is a bad ``tracking.uri`` (exit 2), found before the run takes any lock or writes anything: a scheme
MLflow does not store to (``ftp://``; ``config.tracking.TRACKING_SCHEMES``), a SQLite store whose folder does
not exist or cannot be written (``sqlite:////proc/x.db``; the probe creates and removes one empty file there, where
MLflow's first write would create the database). Once the server answered, MLflow's own retries ride out a blip
mid-run.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from parathink.errors import BadInput, Unavailable
from parathink.redact import redact_text

CONNECT_TIMEOUT_S = 5.0


class TrackingUnavailable(Unavailable):
    """The MLflow server did not answer."""


def ensure_reachable(uri: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    parsed = urlparse(str(uri))
    shown = redact_text(str(uri))
    if parsed.scheme in ("http", "https"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname or "", port), timeout=timeout_s).close()
        except OSError as err:
            raise TrackingUnavailable(f"tracking.uri {shown}: the MLflow server does not answer "
                                      f"({err.strerror or err}); start it, or point tracking.uri at one that "
                                      f"runs") from None
    elif parsed.scheme == "sqlite" and str(uri).startswith("sqlite:///"):
        _writable(Path(str(uri)[len("sqlite:///"):]), "SQLite store", shown)
    else:
        from parathink.config.tracking import TRACKING_SCHEMES

        if parsed.scheme.split("+")[0].lower() not in TRACKING_SCHEMES:
            raise BadInput(f"tracking.uri {shown}: not a store MLflow tracks to (schemes: a path, "
                           f"{', '.join(s + ':' for s in TRACKING_SCHEMES if s)})")


def _writable(store: Path, what: str, shown: str) -> None:
    """The store file ``store`` can be written, or created: its folder exists and takes a new file."""
    if store.is_file():
        if not os.access(store, os.R_OK | os.W_OK):
            raise BadInput(f"tracking.uri {shown}: the {what} {store} cannot be written")
        return
    folder = store.parent
    if not folder.is_dir():
        raise BadInput(f"tracking.uri {shown}: the folder {folder} of the {what} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=".parathink-probe-", dir=folder)
    except OSError as err:
        raise BadInput(f"tracking.uri {shown}: the {what} cannot be created in {folder} "
                       f"({err.strerror or err})") from None
    os.close(fd)
    os.unlink(probe)


def client(uri: str):
    """An ``MlflowClient`` for ``uri``, after ``ensure_reachable``."""
    from mlflow.tracking import MlflowClient

    ensure_reachable(uri)
    return MlflowClient(tracking_uri=str(uri))

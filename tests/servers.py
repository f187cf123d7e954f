"""Real servers and stores for the tests: moto's S3 server on 127.0.0.1, and ready-made SQLite MLflow stores.

Tests exercise the same boto3 and MLflow code paths as production (HTTP to an endpoint taken from the environment);
only the endpoint differs. moto is a dev dependency, imported lazily. These helpers live with the tests, not in the
package: nothing a user installs needs them.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
        "MLFLOW_S3_ENDPOINT_URL")


@contextmanager
def moto_s3(*buckets: str) -> Iterator[str]:
    """Run moto's S3 server, point boto3 (and MLflow) at it through the environment, create ``buckets``.

    Yields the endpoint URL; restores the environment and stops the server on exit.
    """
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "MLFLOW_S3_ENDPOINT_URL": endpoint,
                       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        import boto3

        client = boto3.client("s3")
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


# Creating an MLflow SQLite store runs its schema migrations (~10 s on a busy 2-core machine); tests that each need
# a fresh store copy one store migrated once per process instead.
_template: Path | None = None


def sqlite_store(path: str | Path) -> str:
    """Create a fresh, migrated MLflow SQLite store at ``path``; returns its tracking URI."""
    global _template
    if _template is None or not _template.exists():
        from mlflow.tracking import MlflowClient

        _template = Path(tempfile.mkdtemp(prefix="parathink-mlflow-")) / "template.db"
        MlflowClient(tracking_uri=f"sqlite:///{_template}").search_experiments()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template, path)
    return f"sqlite:///{path}"

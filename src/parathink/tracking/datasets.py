"""What a stage read, as MLflow dataset inputs: the runs table's "Dataset" column and each run's inputs.

Two kinds, both already in the stage's manifest: the outputs of earlier stages it read (``inputs``: stage -> output
hash) and files read from outside the run directory (``external``: URI -> the fingerprint of each file, SHA-256
locally, the ETag on S3). A data snapshot that changes changes its digest here and makes the stage stale
(``parathink.rundir.provenance``), so the digest MLflow shows is the one the rerun decision used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from parathink.redact import redact_text
from parathink.storage.uri import is_s3

MAX_COUNTED_BYTES = 256 * 2**20  # rows are counted for local JSON-lines files up to this size


def _digest(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def _rows(uri: str, fingerprint: dict) -> int | None:
    """Lines of a local JSON-lines file (one record each); None for anything else."""
    path = Path(uri)
    if is_s3(uri) or path.suffix != ".jsonl" or not path.is_file() or path.stat().st_size > MAX_COUNTED_BYTES:
        return None
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def stage_datasets(manifest, run_dir: str) -> list[dict]:
    """One record per thing the stage read: name, source URI, source type, digest, files, bytes, rows."""
    out = []
    for stage, output_hash in sorted(manifest.inputs.items()):
        if output_hash:
            out.append({"name": f"{stage} output", "source": f"{run_dir.rstrip('/')}/{stage}",
                        "source_type": "s3" if is_s3(run_dir) else "local", "digest": output_hash[:16]})
    for uri, files in sorted(manifest.external.items()):
        record = {"name": Path(uri.rstrip("/")).name or uri, "source": redact_text(uri),
                  "source_type": "s3" if is_s3(uri) else "local", "digest": _digest(files),
                  "files": len(files), "bytes": sum(int(m.get("size", 0)) for m in files.values())}
        rows = _rows(uri, files)
        if rows is not None:
            record["rows"] = rows
        out.append(record)
    return out


def log_datasets(client, run_id: str, records: list[dict]) -> None:
    """Log ``stage_datasets`` records as the run's dataset inputs (context ``training``: what the stage consumed)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for r in records:
        profile = {k: r[k] for k in ("files", "bytes", "rows") if k in r}
        dataset = Dataset(name=r["name"], digest=r["digest"], source_type=r["source_type"],
                          source=json.dumps({"uri": r["source"]}), profile=json.dumps(profile) if profile else None)
        inputs.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")]))
    if inputs:
        client.log_inputs(run_id, datasets=inputs)

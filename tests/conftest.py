"""Fixtures every test folder shares.

- ``free_port``: a picker of TCP ports on 127.0.0.1 that nothing listens on (call it once per server);
- ``torchrun``: ``python -m torch.distributed.run --nproc_per_node 2`` on a free port (gloo on CPU, one thread each);
- ``tiny_checkpoint``: a one-layer Qwen3 with the tag tokens, untrained, saved once per session (seconds of RL);
- ``make_curriculum`` / ``curriculum``: the plug-in stages of ``tests/stages/resume_stage.py`` (prep -> train ->
  tune, seconds each) as overrides for the real runner, in a fresh run directory;
- ``mlflow_server``: a real ``mlflow server`` on 127.0.0.1 whose artifacts go to moto's S3 server.

Helper modules of a folder have names of their own (``dag_helpers.py``, ``kube_cluster.py``, ``rl_helpers.py``):
test folders are not packages, so two helpers of one name would shadow each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import free_port as _pick_port

STAGE_FILE = str(Path(__file__).parent / "stages" / "resume_stage.py")


# tests/e2e runs last. Its session fixture starts the local cluster (etcd, the control plane, the kubelet,
# containerd and the chart's pods) and stops it when the session ends; run in the middle of the suite, the idle
# cluster kept a share of the two cores busy under every test after it.
def pytest_collection_modifyitems(config, items):
    e2e = Path(__file__).parent / "e2e"
    items.sort(key=lambda item: e2e in Path(str(item.path)).parents)  # stable: the rest keep their order


@pytest.fixture
def free_port():
    return _pick_port


@pytest.fixture
def torchrun(free_port):
    """``torchrun(*args, timeout=240, env=None)``: two processes, their CompletedProcess (output captured)."""

    def run(*args: str, timeout: int = 240, env: dict | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(free_port()), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "CI": "true", "DS_ACCELERATOR": "cpu",
                                   **(env or {})})

    return run


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A saved one-layer Qwen3 (hidden 32) with a tokenizer trained on the synthetic corpus and every grammar's
    tags: untrained, built the same way every time, fast enough for RL steps and stage runs in tests."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from parathink.data.synthetic import corpus
    from parathink.formats.tags import TAGS
    from parathink.modeling import save_model
    from parathink.modeling.tokenizer import train_tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = train_tokenizer(corpus(200, seed=0))
    tok.add_special_tokens({"additional_special_tokens": [t for g in TAGS.values() for t in g]})
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                         max_position_embeddings=512, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    config._attn_implementation = "sdpa"
    return save_model(Qwen3ForCausalLM(config), tok, tmp_path_factory.mktemp("tiny") / "init")


class Curriculum:
    """Overrides for a chain of test stages: prep -> train -> tune (each reads the one before)."""

    def __init__(self, tmp_path: Path, run_dir: str | None = None, tracking: str = "none"):
        self.tmp = tmp_path
        self.run_dir = run_dir or str(tmp_path / "run")
        self.calls = tmp_path / "calls.jsonl"
        self.tracking = tracking
        self.sections = {
            "prep": {"steps": 2},
            "train": {"steps": 4, "input": "prep", "model": True},
            "tune": {"steps": 3, "input": "train", "model": True},
        }

    def overrides(self, *extra: str, stages=("prep", "train", "tune")) -> list[str]:
        out = [f"run_dir={self.run_dir}", f"tracking={self.tracking}", f"stages=[{','.join(stages)}]"]
        for name, section in self.sections.items():
            out.append(f"+stage_modules.{name}={STAGE_FILE}")
            out.append(f"+{name}.calls={self.calls}")
            out += [f"+{name}.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in section.items()]
        return out + list(extra)

    def calls_made(self) -> list[dict]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines()]

    def ran(self) -> list[str]:
        return [c["stage"] for c in self.calls_made()]


@pytest.fixture
def make_curriculum(tmp_path, monkeypatch):
    """``make_curriculum(tracking="none")``: a Curriculum in ``tmp_path``, the working directory (the default
    sqlite:///mlflow.db and ./mlartifacts land there), progress bars off."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    return lambda tracking="none": Curriculum(tmp_path, tracking=tracking)


@pytest.fixture
def curriculum(make_curriculum):
    return make_curriculum()


@pytest.fixture
def mlflow_server(tmp_path, free_port):
    """The URL of a real ``mlflow server`` (sqlite store) whose artifacts go to moto's S3 server, bucket ``mlflow``."""
    import httpx
    from servers import moto_s3

    with moto_s3("mlflow"):
        port = free_port()
        cmd = [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
               "--artifacts-destination", "s3://mlflow/artifacts"]
        log = open(tmp_path / "server.log", "w")
        # No background job runner (huey): the curriculum does not use MLflow server jobs.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 240  # two mlflow imports; slow when the CPU is shared
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("mlflow server did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
                time.sleep(0.5)
            yield url
        finally:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()

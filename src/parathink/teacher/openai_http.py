"""The ``openai`` teacher: any OpenAI-compatible endpoint (a vLLM server, a hosted API), over plain HTTP.

``concurrency`` requests are in flight at once (a thread pool over one ``httpx.Client``); each request has a
timeout and is retried with exponential back-off on connection errors, timeouts, 429 and 5xx. Records are
yielded as they complete, so the stage's append-only store keeps every finished one: after a crash, or after
the endpoint stays unreachable past the retries, a rerun asks only for what is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import httpx

from parathink.data.prompts import teacher_prompt
from parathink.errors import Unavailable

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


class TeacherUnavailable(Unavailable):
    """The endpoint gave no usable answer within the configured retries (exit 1: a retry resumes from what was
    kept)."""


@dataclass(frozen=True)
class OpenAIConfig:
    base_url: str
    model: str
    api: str = "chat"  # chat: /chat/completions with the prompt as a user message | completions: raw prompt
    api_key_env: str | None = "OPENAI_API_KEY"  # the key is read from this variable, never from a config file
    concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 1.0
    max_tokens: int = 1024
    temperature: float = 0.7
    top_p: float = 1.0
    grammar: str = "parallel_r1"
    extra_body: dict | None = None  # server-specific request fields (e.g. vLLM's min_tokens, top_k)


class OpenAITeacher:
    name = "openai"

    def __init__(self, cfg: OpenAIConfig, sleep=time.sleep):
        if cfg.concurrency < 1:
            raise ValueError(f"teacher.openai.concurrency must be >= 1, got {cfg.concurrency}")
        if cfg.api not in ("chat", "completions"):
            raise ValueError(f"teacher.openai.api must be chat or completions, got {cfg.api!r}")
        self.cfg, self._sleep = cfg, sleep
        headers = {}
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.Client(base_url=cfg.base_url.rstrip("/"), headers=headers, timeout=cfg.timeout_s,
                                   limits=httpx.Limits(max_connections=cfg.concurrency,
                                                       max_keepalive_connections=cfg.concurrency))

    def _payload(self, problem: str) -> tuple[str, dict]:
        c = self.cfg
        text = teacher_prompt(problem, c.grammar)
        common = {"model": c.model, "max_tokens": c.max_tokens, "temperature": c.temperature, "top_p": c.top_p,
                  **(c.extra_body or {})}
        if c.api == "chat":
            return "/chat/completions", {**common, "messages": [{"role": "user", "content": text}]}
        return "/completions", {**common, "prompt": text}

    def complete(self, problem: str) -> dict:
        """One response (``text``, ``finish_reason``, ``usage``), retried as configured."""
        url, payload = self._payload(problem)
        last = ""
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                self._sleep(self.cfg.backoff_s * 2 ** (attempt - 1))
            try:
                r = self.client.post(url, json=payload)
            except (httpx.TransportError, httpx.TimeoutException) as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code in RETRYABLE_STATUS:
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                continue
            if r.status_code != 200:  # 400/401/404: retrying cannot help
                raise TeacherUnavailable(f"{self.cfg.base_url}{url}: HTTP {r.status_code}: {r.text[:300]}")
            choice = r.json()["choices"][0]
            text = choice["message"]["content"] if self.cfg.api == "chat" else choice["text"]
            return {"text": text or "", "finish_reason": choice.get("finish_reason"), "usage": r.json().get("usage")}
        raise TeacherUnavailable(f"{self.cfg.base_url}{url}: no answer after {self.cfg.max_retries + 1} tries "
                                 f"(last: {last})")

    def generate(self, problems: list[dict]) -> Iterator[dict]:
        if not problems:
            return
        pool = ThreadPoolExecutor(max_workers=self.cfg.concurrency, thread_name_prefix="teacher-http")
        pending: dict[Future, dict] = {}
        queue = iter(problems)
        error: BaseException | None = None
        try:
            for p in queue:  # fill the window
                pending[pool.submit(self.complete, p["problem"])] = p
                if len(pending) >= self.cfg.concurrency:
                    break
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    p = pending.pop(fut)
                    try:
                        out = fut.result()
                    except BaseException as e:  # keep draining what already finished, then raise
                        error = error or e
                        continue
                    yield {**p, "response": out["text"], "finish_reason": out["finish_reason"]}
                    if error is None:
                        nxt = next(queue, None)
                        if nxt is not None:
                            pending[pool.submit(self.complete, nxt["problem"])] = nxt
            if error is not None:
                raise error
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self.client.close()

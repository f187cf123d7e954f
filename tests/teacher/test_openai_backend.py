"""The openai backend against a real HTTP server on 127.0.0.1 that speaks the OpenAI chat API.

The server is ours (a few lines of http.server) so each test can make it slow, flaky or dead on purpose;
the real vLLM server is exercised by test_vllm_server.py.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hydra import compose, initialize_config_dir

from parathink.data import synthetic
from parathink.pipeline.compose import config_dir
from parathink.stages import teacher as teacher_stage
from parathink.stages.context import StageContext
from parathink.teacher import TeacherUnavailable
from parathink.teacher.openai_http import OpenAIConfig, OpenAITeacher
from parathink.teacher.store import RawStore

TRACE = "<Parallel>\n<Path>\nA\n</Path>\n<Path>\nB\n</Path>\n</Parallel>\n<Summary>\nS\n</Summary>\n\\boxed{{{}}}"


class FakeOpenAI:
    """Answers /v1/chat/completions; ``fail_first`` requests get 503, after ``serve_only`` successes all get 503.

    ``hold_until=N`` keeps the first requests waiting (up to 10 s) until N are in flight at once, so a test of the
    client's concurrency does not depend on how fast a loaded machine schedules its threads.
    """

    def __init__(self, delay=0.0, fail_first=0, serve_only=None, content=None, hold_until=0):
        self.delay, self.fail_first, self.serve_only = delay, fail_first, serve_only
        self.content = TRACE.format(7) if content is None else content
        self.hold_until = hold_until
        self.lock = threading.Condition()
        self.requests = self.successes = self.in_flight = self.max_in_flight = 0
        self.problems_served: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests += 1
                    n = outer.requests
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    outer.lock.notify_all()
                    outer.lock.wait_for(lambda: outer.max_in_flight >= outer.hold_until, timeout=10)
                try:
                    time.sleep(outer.delay)
                    with outer.lock:
                        fail = n <= outer.fail_first or (outer.serve_only is not None
                                                         and outer.successes >= outer.serve_only)
                        if not fail:
                            outer.successes += 1
                    if fail:
                        self._send(503, {"error": "overloaded"})
                        return
                    problem = body["messages"][0]["content"].rsplit("Problem: ", 1)[1].strip()
                    with outer.lock:
                        outer.problems_served.append(problem)
                    self._send(200, {"choices": [{"message": {"role": "assistant", "content": outer.content},
                                                  "finish_reason": "stop"}], "usage": {"completion_tokens": 9}})
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _teacher(url, sleeps=None, **kw):
    cfg = OpenAIConfig(base_url=url, model="m", **{"max_retries": 3, "backoff_s": 0.5, "timeout_s": 5, **kw})
    return OpenAITeacher(cfg, sleep=(sleeps.append if sleeps is not None else time.sleep))


def test_concurrent_requests_fill_the_window():
    problems = synthetic.generate("easy", "train", 24)
    with FakeOpenAI(delay=0.05, hold_until=8) as server:
        out = list(_teacher(server.url, concurrency=8).generate(problems))
    assert sorted(r["id"] for r in out) == sorted(p["id"] for p in problems)
    assert server.max_in_flight == 8 and server.requests == 24
    assert all(r["response"] == TRACE.format(7) and r["finish_reason"] == "stop" for r in out)


def test_retries_with_exponential_back_off():
    sleeps = []
    with FakeOpenAI(fail_first=3) as server:
        out = list(_teacher(server.url, sleeps, concurrency=1).generate(synthetic.generate("easy", "train", 2)))
    assert len(out) == 2 and server.requests == 5
    assert sleeps == [0.5, 1.0, 2.0]  # three failures of the first request, each retry waits twice as long


def test_unreachable_endpoint_is_a_clear_error_after_the_retries():
    sleeps = []
    with FakeOpenAI() as server:
        url = server.url
    with pytest.raises(TeacherUnavailable, match=r"127\.0\.0\.1.*no answer after 4 tries.*ConnectError"):
        list(_teacher(url, sleeps, concurrency=1).generate(synthetic.generate("easy", "train", 3)))
    assert sleeps == [0.5, 1.0, 2.0]  # one problem failed its 4 tries; no new request was sent after it


@pytest.fixture
def openai_cfg(tmp_path):
    def make(url):
        with initialize_config_dir(version_base=None, config_dir=str(config_dir())):
            return compose(config_name="config", overrides=[
                "teacher.backend=openai", f"teacher.openai.base_url={url}", "teacher.openai.model=m",
                "teacher.openai.concurrency=4", "teacher.openai.max_retries=1", "teacher.openai.backoff_s=0.01",
                "teacher.limit=12"])
    return make


def test_stage_resumes_after_the_endpoint_dies_with_nothing_lost_or_doubled(tmp_path, openai_cfg):
    ctx = StageContext.standalone("teacher", tmp_path)
    ctx.progress = False
    with FakeOpenAI(serve_only=5) as server:
        cfg = openai_cfg(server.url)
        teacher_stage.validate(cfg)
        with pytest.raises(TeacherUnavailable, match=r"5 of 12 records kept in .*raw\.jsonl, a rerun resumes"):
            teacher_stage.run(cfg, ctx)
    assert len(RawStore(ctx.work_dir / "raw.jsonl")) == 5
    with FakeOpenAI() as server:
        metrics = teacher_stage.run(openai_cfg(server.url), ctx)
        assert server.successes == 7  # only the missing problems were asked for
    raw = [json.loads(line) for line in (ctx.out_dir / "raw.jsonl").read_text().splitlines()]
    problems = teacher_stage.load_problem_sets(cfg.teacher.problems, 0, 12)
    assert [r["id"] for r in raw] == [p["id"] for p in problems]  # all 12, once each, in problem order
    assert set(raw[0]) >= {"id", "source", "problem", "answer", "level", "response"}
    assert metrics["resumed"] == 5 and metrics["generated"] == 7 and metrics["parallel_rate"] == 1.0


def test_a_lone_surrogate_from_the_endpoint_is_kept_escaped_and_rejected_by_the_filter(tmp_path, openai_cfg):
    from parathink.quality.traces import FilterConfig, filter_records, read_raw

    ctx = StageContext.standalone("teacher", tmp_path)
    ctx.progress = False
    with FakeOpenAI(content=TRACE.format(7) + "\ud800") as server:  # valid JSON, not encodable as UTF-8
        cfg = openai_cfg(server.url)
        metrics = teacher_stage.run(cfg, ctx)
        assert metrics["problems"] == 12 and teacher_stage.run(cfg, ctx)["generated"] == 0  # a rerun resumes
    result = filter_records(read_raw(ctx.out_dir / "raw.jsonl"), FilterConfig())
    assert len(result.bad_lines) == 12 and "lone surrogate" in result.bad_lines[0].why

"""A JSON-over-HTTP server on 127.0.0.1 (a free port) that hands every request to ``route``; for the stand-ins
of APIs that cannot run here (kfp_api.py, kube_api.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

# route(method, path, query, body) -> (status, payload)
Route = Callable[[str, str, dict, dict], tuple[int, dict]]


class JsonServer:
    def __init__(self, route: Route):
        self.calls: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(route))
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "JsonServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self, route: Route):
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                calls.append((self.command, url.path))
                status, payload = route(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args):  # the test's log stays the test's
                pass

        return Handler

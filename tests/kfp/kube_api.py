"""A stand-in for the part of the Kubernetes API that the TrainJob launcher uses: create, read and delete one
namespaced custom resource, on 127.0.0.1.

Why not the real API server of tests/deploy (kube-apiserver 1.20 built with Go 1.27): it serves Pods, but every
create of a custom resource panics inside it (json-iterator/reflect2 iterating a Go map while coercing the
object's metadata: `objectmeta.GetObjectMeta`), so no TrainJob can be created there; test_kube_apiserver.py
creates the stages' Pods on it. The test plays the Trainer controller by writing ``status`` into ``objects``.
"""

from __future__ import annotations

import re

from json_server import JsonServer

OBJECT = re.compile(r"^/apis/(?P<gv>[^/]+/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(/(?P<name>[^/]+))?$")


class KubeApiServer(JsonServer):
    def __init__(self):
        self.objects: dict[str, dict] = {}  # name -> object
        self.deleted: list[str] = []
        self.failing_reads = 0  # the next reads answer 503, as an API server does while it restarts
        super().__init__(self.route)

    @staticmethod
    def _status(code: int, reason: str, message: str) -> tuple[int, dict]:
        return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                      "message": message, "code": code}

    def route(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        m = OBJECT.match(path)
        if not m:
            return self._status(404, "NotFound", f"{path} is not served here")
        name = m["name"]
        if method == "POST" and name is None:
            name = body["metadata"]["name"]
            if name in self.objects:
                return self._status(409, "AlreadyExists", f"{m['plural']} {name!r} already exists")
            self.objects[name] = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
            return 201, self.objects[name]
        if name not in self.objects:
            return self._status(404, "NotFound", f"{m['plural']} {name!r} not found")
        if method == "GET" and self.failing_reads > 0:
            self.failing_reads -= 1
            return self._status(503, "ServiceUnavailable", "the API server is restarting")
        if method == "GET":
            return 200, self.objects[name]
        if method == "DELETE":
            self.deleted.append(name)
            return 200, self.objects.pop(name)
        return self._status(405, "MethodNotAllowed", f"{method} {path}")

"""A stand-in for the master's routes an agent uses, for tests (stdlib only).

`FakeMaster` serves model definitions, takes task logs and agent registrations on a free local
port from a background thread, and records what it got.
"""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def make_tgz(files: dict[str, str | bytes], *, mode: int = 0o644) -> bytes:
    """A .tar.gz holding `files` (path -> content), as the master stores a model definition."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeMaster:
    def __init__(self) -> None:
        self.model_defs: dict[int, bytes] = {}
        self.model_def_requests: list[int] = []
        self.logs: list[dict[str, Any]] = []
        self.log_posts = 0
        self.metric_posts: list[tuple[int, dict[str, Any], str]] = []  # trial, body, auth
        self.fail_log_posts = 0  # answer this many log posts with 503 first
        self.registrations: list[tuple[str, dict[str, Any]]] = []
        self.fail_registrations = 0
        self.cluster_id = "test-cluster"
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeMaster:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeMaster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_lines(self, stdtype: str | None = None) -> list[str]:
        with self.lock:
            return [e["log"] for e in self.logs if stdtype is None or e["stdtype"] == stdtype]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        master = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"null")

            def do_GET(self) -> None:
                m = re.fullmatch(r"/api/v1/experiments/(\d+)/model_def", self.path)
                if m:
                    exp_id = int(m.group(1))
                    with master.lock:
                        master.model_def_requests.append(exp_id)
                        tgz = master.model_defs.get(exp_id)
                    if tgz is None:
                        self._send(404, {"message": f"experiment {exp_id} not found"})
                    else:
                        self._send(200, {"b64Tgz": base64.b64encode(tgz).decode()})
                elif self.path == "/api/v1/master":
                    self._send(200, {"version": "0.1.0", "masterId": "m",
                                     "clusterId": master.cluster_id, "clusterName": "test"})
                else:
                    self._send(404, {"message": "not found"})

            def do_POST(self) -> None:
                m = re.fullmatch(r"/api/v1/trials/(\d+)/metrics", self.path)
                if m:
                    with master.lock:
                        master.metric_posts.append((int(m.group(1)), self._body(),
                                                    self.headers.get("Authorization", "")))
                    self._send(200, {})
                    return
                if self.path != "/api/v1/task/logs":
                    self._send(404, {"message": "not found"})
                    return
                body = self._body()
                with master.lock:
                    master.log_posts += 1
                    if master.fail_log_posts > 0:
                        master.fail_log_posts -= 1
                        failing = True
                    else:
                        failing = False
                        master.logs.extend(body["logs"])
                self._send(503, {"message": "busy"}) if failing else self._send(200, {})

            def do_PUT(self) -> None:
                m = re.fullmatch(r"/api/v1/agents/([^/]+)", self.path)
                if not m:
                    self._send(404, {"message": "not found"})
                    return
                body = self._body()
                with master.lock:
                    if master.fail_registrations > 0:
                        master.fail_registrations -= 1
                        failing = True
                    else:
                        failing = False
                        master.registrations.append((m.group(1), body))
                self._send(503, {"message": "starting"}) if failing else self._send(200, {})

        return Handler

"""The master's REST API as far as the harness uses it, behind httpx.MockTransport."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx


class FakeMaster:
    """The master's REST API as far as the harness uses it, with ways to misbehave."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[dict[str, Any]]] = []  # every batch attempt, even failed ones
        self.stored: dict[tuple[int, str, int], dict[str, Any]] = {}  # the server's key
        self.stored_count = 0  # distinct keys ever stored
        self.fail_batches = 0  # the next N batch posts fail (alternately 503 / connection)
        self.lose_answers = 0  # the next N batch posts are stored, then the answer is lost
        self.refuse_batches = False  # answer 400
        self.checkpoints: list[dict[str, Any]] = []
        self.fail_checkpoints = 0  # the next N checkpoint reports find no master
        self.progress: list[float] = []
        self.early_exits: list[str] = []
        self.preempt = threading.Event()
        # A validation at or past this step is answered with the searcher's stop (the polls
        # do not hear of it).
        self.stop_at_validation: int | None = None
        self.fail_polls = 0
        self.polls: list[str] = []
        self.acks = 0
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if path.endswith("/metrics/batch"):
            return self._batch(request, body)
        if path.endswith("/progress"):
            with self.lock:
                self.progress.append(body)
            return httpx.Response(200, json={})
        if path.endswith("/early_exit"):
            with self.lock:
                self.early_exits.append(body["earlyExit"]["reason"])
            return httpx.Response(200, json={})
        if path == "/api/v1/checkpoints":
            with self.lock:
                if self.fail_checkpoints:
                    self.fail_checkpoints -= 1
                    raise httpx.ConnectError("connection refused", request=request)
                self.checkpoints.append(body)
            return httpx.Response(200, json={})
        if path.endswith("/signals/preemption"):
            timeout = int(request.url.params["timeoutSeconds"])
            with self.lock:
                self.polls.append(request.url.params["timeoutSeconds"])
                if self.fail_polls:
                    self.fail_polls -= 1
                    return httpx.Response(502, json={"message": "bad gateway"})
            if timeout:
                self.preempt.wait(0.02)  # a (short) long poll
            return httpx.Response(200, json={"preempt": self.preempt.is_set()})
        if path.endswith("/signals/ack_preemption"):
            with self.lock:
                self.acks += 1
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"message": f"no route {path}"})

    def _batch(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        with self.lock:
            self.batches.append(body["reports"])
            if self.refuse_batches:
                return httpx.Response(400, json={"message": "trial 1 is not running"})
            if self.fail_batches:
                self.fail_batches -= 1
                if self.fail_batches % 2:
                    raise httpx.ConnectError("connection refused", request=request)
                return httpx.Response(503, json={"message": "unavailable"})
            for report in body["reports"]:
                m = report["metrics"]
                key = (m["trialId"], report["group"], m["stepsCompleted"])
                if key not in self.stored:
                    self.stored_count += 1
                self.stored[key] = report
            if self.lose_answers:
                self.lose_answers -= 1
                raise httpx.ReadError("connection reset after the server stored it")
            stop = self.stop_at_validation
            stopped = stop is not None and any(
                r["group"] == "validation" and r["metrics"]["stepsCompleted"] >= stop
                for r in body["reports"])
            return httpx.Response(200, json={"stored": len(body["reports"]), "preempt": stopped})

    def steps(self, group: str) -> list[int]:
        with self.lock:
            return sorted(k[2] for k in self.stored if k[1] == group)

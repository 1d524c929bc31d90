"""A fake master for testing the CLI without sockets, over `httpx.MockTransport`.

    fake = FakeMaster()
    fake.on("GET", "/experiments/1", {"experiment": {...}})
    monkeypatch.setattr(cli.client, "transport_factory", fake.transport)
    result = CliRunner().invoke(app, ["experiment", "describe", "1"])
    assert fake.requests[0].url.path == "/api/v1/experiments/1"

Answers: a dict/list (sent as JSON with status 200), an `httpx.Response`, or a callable taking the
request and returning either. Several answers for one route are served in order, the last one
repeatedly (a state that changes between polls). A request no route matches gets a 404 in the
contract's error shape, so a test sees what the CLI asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx

Answer = Any


def ndjson(records: Iterable[Any], status: int = 200) -> httpx.Response:
    """A streamed NDJSON answer."""
    body = "".join(json.dumps(r) + "\n" for r in records)
    headers = {"content-type": "application/x-ndjson"}
    return httpx.Response(status, content=body.encode(), headers=headers)


def error(status: int, message: str, details: list[str] | None = None) -> httpx.Response:
    """An error in the contract's shape."""
    return httpx.Response(status, json={"message": message, "details": details or []})


class FakeMaster:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *answers: Answer) -> FakeMaster:
        """Answer `method` on `/api/v1{path}` (query strings ignored)."""
        self.routes[(method.upper(), path)] = list(answers) or [{}]
        return self

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/api/v1")
        answers = self.routes.get((request.method, path))
        if answers is None:
            return error(404, f"fake master: no route for {request.method} {request.url.path}")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)

    def transport(self) -> httpx.BaseTransport:
        return httpx.MockTransport(self.handle)

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        """The requests made to one route."""
        return [
            r
            for r in self.requests
            if r.method == method.upper() and r.url.path == "/api/v1" + path
        ]

    def body(self, method: str, path: str, index: int = -1) -> Any:
        return json.loads(self.sent(method, path)[index].content)


def unreachable(request: httpx.Request) -> httpx.Response:
    """A handler for a master that is not there."""
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


# -- sample objects in the contract's shapes: experiment 4 with trials 11 and 12 ---------------


def experiment(state: str = "STATE_COMPLETED", **extra: object) -> dict[str, Any]:
    return {
        "id": 4,
        "name": "digits-random",
        "description": "",
        "labels": ["demo"],
        "state": state,
        "searcherType": "random",
        "searcherMetric": "validation_loss",
        "smallerIsBetter": True,
        "startTime": "2025-01-02T10:00:00+00:00",
        "endTime": "2025-01-02T10:03:05+00:00" if state != "STATE_ACTIVE" else None,
        "progress": 1.0,
        "numTrials": 2,
        "trialIds": [11, 12],
        "bestTrialId": 12,
        "bestValidation": 0.25,
        "archived": False,
        "username": "ada",
        "resourcePool": "default",
        **extra,
    }


def report(steps: int, loss: float) -> dict[str, Any]:
    return {
        "group": "validation",
        "stepsCompleted": steps,
        "trialRunId": 1,
        "reportTime": "2025-01-02T10:02:00+00:00",
        "metrics": {"validation_loss": loss, "accuracy": 0.9},
    }


def trial(tid: int, loss: float, best: float, state: str = "STATE_COMPLETED") -> dict[str, Any]:
    return {
        "id": tid,
        "experimentId": 4,
        "requestId": tid,
        "state": state,
        "hparams": {"lr": 0.01 * tid, "optimizer": {"momentum": 0.9}, "activation": "relu"},
        "startTime": "2025-01-02T10:00:01+00:00",
        "endTime": "2025-01-02T10:03:00+00:00",
        "restarts": 0,
        "runId": 1,
        "totalBatchesProcessed": 300,
        "progress": 1.0,
        "latestValidation": report(300, loss),
        "bestValidation": report(200, best),
        "searcherMetricValue": best,
        "latestCheckpointUuid": f"latest-{tid}",
        "taskId": f"4.{tid}",
        "agentId": "local-agent",
        "earlyExitReason": None,
    }


TRIALS = [trial(11, 0.5, 0.45), trial(12, 0.3, 0.25)]


def checkpoint(uuid: str, trial_id: int, steps: int, metric: float | None) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "taskId": f"4.{trial_id}",
        "allocationId": f"4.{trial_id}.1",
        "reportTime": "2025-01-02T10:02:30+00:00",
        "resources": {"model.npz": 2048, "meta.json": 100},
        "metadata": {"steps_completed": steps},
        "state": "STATE_COMPLETED",
        "storagePath": f"/ckpt/{uuid}",
        "training": {
            "trialId": trial_id,
            "experimentId": 4,
            "hparams": {},
            "validationMetrics": None,
            "searcherMetric": metric,
        },
    }


CHECKPOINTS = [
    checkpoint("c-11-300", 11, 300, 0.5),
    checkpoint("c-12-200", 12, 200, 0.25),
    checkpoint("c-12-300", 12, 300, 0.3),
]


def log(lid: int, trial_id: int, text: str) -> dict[str, Any]:
    return {
        "result": {
            "id": lid,
            "trialId": trial_id,
            "taskId": f"4.{trial_id}",
            "agentId": "a",
            "timestamp": "2025-01-02T10:00:02+00:00",
            "level": "LOG_LEVEL_INFO",
            "stdtype": "stdout",
            "log": text,
        }
    }

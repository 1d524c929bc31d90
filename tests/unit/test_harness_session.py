"""The harness's HTTP session: retries on connection errors and 5xx, clear errors on 4xx."""

import json

import httpx
import pytest

from harness.core import APIError, MasterUnavailable
from harness.core._session import Backoff, Session

FAST = Backoff(initial=0.001, maximum=0.002)


def session_for(handler, **kwargs) -> Session:
    return Session(
        "http://master:8080", transport=httpx.MockTransport(handler), backoff=FAST, **kwargs
    )


def test_retries_connection_errors_and_5xx_then_succeeds() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(503, json={"message": "starting"})
        return httpx.Response(200, json={"ok": True})

    s = session_for(handler)
    assert s.post("/api/v1/x", body={"a": 1}) == {"ok": True}
    assert len(calls) == 3
    assert [json.loads(c.content) for c in calls] == [{"a": 1}] * 3


def test_gives_up_after_the_retry_budget() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(500, json={"message": "boom"})

    with pytest.raises(MasterUnavailable, match=r"after 3 attempt\(s\): status 500: boom"):
        session_for(handler, retries=2).get("/api/v1/master")
    assert len(calls) == 3


def test_4xx_raises_the_servers_message_without_retrying() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(
            400, json={"message": "bad metrics", "details": ["reports.0.group: expected"]}
        )

    with pytest.raises(APIError) as info:
        session_for(handler).post("/api/v1/trials/1/metrics/batch", body={})
    assert len(calls) == 1
    err = info.value
    assert (err.status_code, err.message, err.details) == (
        400, "bad metrics", ["reports.0.group: expected"],
    )
    assert "POST /api/v1/trials/1/metrics/batch failed with 400: bad metrics" in str(err)


def test_token_and_empty_answers() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200)

    assert session_for(handler, token="t0k").post("/x") is None
    assert seen == ["Bearer t0k"]


def test_backoff_grows_and_is_capped() -> None:
    b = Backoff(initial=1.0, maximum=5.0, jitter=0.0)
    assert [b.delay(i) for i in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]

"""tests/master_fixtures.py `serving_in_process`: API servers that share a test worker's process.

A worker serves the session's live master and, meanwhile, masters of single modules; they stop
in whatever order their fixtures end, and a stream served afterwards must still stream."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI
from sse_starlette import EventSourceResponse, ServerSentEvent

from common.processes import free_port
from tests.master_fixtures import serving_in_process

TICKS = 4
TICK_SECONDS = 0.3  # sse_starlette looks for a server's exit every 0.5 s


def _ticking_app() -> FastAPI:
    app = FastAPI()

    @app.get("/ticks")
    async def ticks() -> EventSourceResponse:
        async def events() -> AsyncIterator[ServerSentEvent]:
            for n in range(TICKS):
                yield ServerSentEvent(data=str(n), event="tick")
                await asyncio.sleep(TICK_SECONDS)

        return EventSourceResponse(events())

    return app


async def _ticks(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client, \
            client.stream("GET", "/ticks") as response:
        return [line.removeprefix("data: ") async for line in response.aiter_lines()
                if line.startswith("data:")]


async def test_a_stream_still_streams_after_servers_stopped_out_of_their_starting_order() -> None:
    before = signal.getsignal(signal.SIGTERM)
    first = serving_in_process(_ticking_app(), free_port())
    second = serving_in_process(_ticking_app(), free_port())
    await first.__aenter__()
    await second.__aenter__()
    await first.__aexit__(None, None, None)  # the first started stops first
    await second.__aexit__(None, None, None)
    assert signal.getsignal(signal.SIGTERM) is before

    port = free_port()
    async with serving_in_process(_ticking_app(), port):
        assert await _ticks(f"http://127.0.0.1:{port}") == [str(n) for n in range(TICKS)]

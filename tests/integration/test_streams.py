"""The dashboard's Server-Sent Events over real HTTP: a trial's logs and an experiment's state.

Experiments, trials and log lines are rows made directly in the session's database (a stream
only reads); the tests change rows while a stream is open and watch what arrives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEARCHER = {"name": "single", "metric": "loss", "smaller_is_better": True,
            "max_length": {"batches": 100}}


@dataclass
class Event:
    event: str
    data: Any
    id: str | None


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """Parse an SSE body into events (comments such as pings are skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in fields:
                yield Event(fields.get("event", "message"), json.loads(fields["data"]),
                            fields.get("id"))
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields[name] = value.removeprefix(" ")


async def make_trial(master: LiveMaster, state: str, experiment_state: str = "ACTIVE") -> int:
    config = {"name": "streams", "searcher": SEARCHER, "resources": {"resource_pool": "default"}}
    async with master.pool.acquire() as conn:
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner)"
            " VALUES ('streams', $1, '', 1, $2, 'admin') RETURNING id",
            config,
            experiment_state,
        )
        trial_id: int = await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state)"
            " VALUES ($1, 0, '{\"lr\": 0.1}', 1, $2) RETURNING id",
            experiment_id,
            state,
        )
    return trial_id


async def add_log(master: LiveMaster, trial_id: int, text: str) -> int:
    log_id: int = await master.pool.fetchval(
        "INSERT INTO task_logs (trial_id, task_id, stdtype, log) VALUES ($1, $2, 'stdout', $3)"
        " RETURNING id",
        trial_id,
        f"x.{trial_id}",
        text,
    )
    return log_id


async def experiment_of(master: LiveMaster, trial_id: int) -> int:
    value: int = await master.pool.fetchval(
        "SELECT experiment_id FROM trials WHERE id = $1", trial_id
    )
    return value


async def test_log_stream_sends_the_lines_then_ends_for_a_finished_trial(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master, "COMPLETED")
    ids = [await add_log(live_master, trial_id, f"line {i}\n") for i in range(3)]
    async with api.stream("GET", f"/api/v1/trials/{trial_id}/logs/stream") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        got = [e async for e in events(response)]
    assert [e.event for e in got] == ["log", "log", "log", "end"]
    assert [e.data["log"] for e in got[:3]] == ["line 0\n", "line 1\n", "line 2\n"]
    assert [e.id for e in got[:3]] == [str(i) for i in ids]
    assert got[0].data["trialId"] == trial_id


async def test_log_stream_follows_new_lines_until_the_trial_ends(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master, "RUNNING")
    await add_log(live_master, trial_id, "before\n")
    async with api.stream("GET", f"/api/v1/trials/{trial_id}/logs/stream") as response:
        stream = events(response)
        first = await asyncio.wait_for(anext(stream), 10)
        assert first.data["log"] == "before\n"
        await add_log(live_master, trial_id, "while open\n")
        second = await asyncio.wait_for(anext(stream), 10)
        assert (second.event, second.data["log"]) == ("log", "while open\n")
        await live_master.pool.execute(
            "UPDATE trials SET state = 'COMPLETED' WHERE id = $1", trial_id
        )
        await add_log(live_master, trial_id, "last words\n")  # drained before the end
        rest = [e async for e in stream]
    assert [(e.event, e.data.get("log")) for e in rest] == [
        ("log", "last words\n"), ("end", None)]


async def test_a_followed_log_stream_ends_when_its_trial_is_deleted(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """A deleted trial never becomes terminal: its stream ends rather than waiting for ever."""
    trial_id = await make_trial(live_master, "RUNNING")
    await add_log(live_master, trial_id, "before\n")
    async with api.stream("GET", f"/api/v1/trials/{trial_id}/logs/stream") as response:
        stream = events(response)
        first = await asyncio.wait_for(anext(stream), 10)
        assert first.data["log"] == "before\n"
        await live_master.pool.execute(
            "DELETE FROM experiments WHERE id = $1", await experiment_of(live_master, trial_id))
        rest = await asyncio.wait_for(_all(stream), 10)
    assert [e.event for e in rest] == ["end"]


async def _all(stream: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in stream]


async def test_experiment_log_stream_starts_at_its_tail_and_names_each_trial(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """All the experiment's trials' lines, from the last `tail` of them (an experiment of many
    trials has millions), each naming its trial; none of another experiment's."""
    first = await make_trial(live_master, "COMPLETED", experiment_state="COMPLETED")
    experiment_id = await experiment_of(live_master, first)
    second: int = await live_master.pool.fetchval(
        "INSERT INTO trials (experiment_id, request_id, hparams, seed, state)"
        " VALUES ($1, 1, '{}', 1, 'COMPLETED') RETURNING id", experiment_id)
    stranger = await make_trial(live_master, "COMPLETED")
    for i in range(6):
        await add_log(live_master, (first, second)[i % 2], f"line {i}\n")
        await add_log(live_master, stranger, "not this experiment's\n")
    path = f"/api/v1/experiments/{experiment_id}/logs/stream"
    async with api.stream("GET", path, params={"tail": 3}) as response:
        assert response.status_code == 200
        got = [e async for e in events(response)]
    assert [(e.data.get("log"), e.data.get("trialId")) for e in got] == [
        ("line 3\n", second), ("line 4\n", first), ("line 5\n", second), (None, None)]
    async with api.stream("GET", path) as response:  # the default tail holds them all
        assert len([e async for e in events(response)]) == 7
    too_long = await api.get(path, params={"tail": 10**9})
    assert too_long.status_code == 400 and "tail" in too_long.text
    missing = await api.get("/api/v1/experiments/987654321/logs/stream")
    assert missing.status_code == 404


async def test_log_stream_resumes_after_last_event_id(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master, "COMPLETED")
    ids = [await add_log(live_master, trial_id, f"line {i}\n") for i in range(3)]
    async with api.stream("GET", f"/api/v1/trials/{trial_id}/logs/stream",
                          headers={"Last-Event-ID": str(ids[0])}) as response:
        got = [e async for e in events(response)]
    assert [e.data.get("log") for e in got] == ["line 1\n", "line 2\n", None]


async def test_experiment_stream_sends_changes_only_and_ends_when_terminal(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    trial_id = await make_trial(live_master, "RUNNING")
    experiment_id = await experiment_of(live_master, trial_id)
    received: asyncio.Queue[Event] = asyncio.Queue()

    async def read(response: httpx.Response) -> None:
        async for event in events(response):
            await received.put(event)

    async with api.stream("GET", f"/api/v1/experiments/{experiment_id}/stream") as response:
        assert response.status_code == 200
        reader = asyncio.create_task(read(response))
        first = await asyncio.wait_for(received.get(), 10)
        assert first.event == "experiment"
        assert first.data["experiment"]["id"] == experiment_id
        assert first.data["experiment"]["state"] == "STATE_ACTIVE"
        assert [t["id"] for t in first.data["trials"]] == [trial_id]
        # Nothing changed: nothing is sent (the server polls about once a second).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(received.get(), 2.5)
        await live_master.pool.execute("UPDATE trials SET progress = 0.5 WHERE id = $1", trial_id)
        changed = await asyncio.wait_for(received.get(), 10)
        assert changed.data["trials"][0]["progress"] == 0.5
        await live_master.pool.execute(
            "UPDATE experiments SET state = 'COMPLETED' WHERE id = $1", experiment_id
        )
        await asyncio.wait_for(reader, 10)  # the stream ends by itself
    rest = [received.get_nowait() for _ in range(received.qsize())]
    assert [e.event for e in rest] == ["experiment", "end"]
    assert rest[0].data["experiment"]["state"] == "STATE_COMPLETED"


async def test_streams_answer_4xx_for_unknown_or_bad_ids(api: httpx.AsyncClient) -> None:
    for path in ("/api/v1/trials/999999999/logs/stream",
                 "/api/v1/experiments/999999999/stream"):
        answer = await api.get(path)
        assert answer.status_code == 404, path
        assert "not found" in answer.json()["message"]
    too_big = await api.get("/api/v1/trials/110570845175/logs/stream")
    assert too_big.status_code == 400, too_big.text
    bad_resume = await api.get("/api/v1/trials/1/logs/stream", headers={"Last-Event-ID": "x"})
    assert bad_resume.status_code == 400
    assert any("last-event-id" in d.lower() for d in bad_resume.json()["details"])


async def test_streams_need_a_token_or_the_dashboard_cookie(
    live_master: LiveMaster,
) -> None:
    trial_id = await make_trial(live_master, "COMPLETED")
    await add_log(live_master, trial_id, "secret\n")
    path = f"/api/v1/trials/{trial_id}/logs/stream"
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as anonymous:
        answer = await anonymous.get(path)
        assert answer.status_code == 401
        assert "message" in answer.json()
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30,
                                 cookies={"auth": live_master.admin_token}) as browser:
        answer = await browser.get(path)
        assert answer.status_code == 200
        assert "secret" in answer.text

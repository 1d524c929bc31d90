"""The preemption long-poll waits on PostgreSQL's notification, not on reading the row in a loop:
it answers as soon as a pause reaches the trial's row, reads the row only when it changes, and
ends when its caller hangs up."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx

from api.preemption import RECHECK_SECONDS, PreemptionWatch
from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import LiveMaster


async def test_a_waiting_poll_wakes_on_the_rows_change_only(
    postgres_url: str, pool: asyncpg.Pool, api: httpx.AsyncClient
) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    watch = PreemptionWatch(postgres_url)
    never: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    try:
        assert await watch.listening()
        async with watch.watching(trial["id"]) as changes:
            began = time.monotonic()
            quiet = asyncio.create_task(changes.wait(1.0, never))
            await pool.execute("UPDATE trials SET state = state WHERE id = $1", trial["id"])
            await quiet  # another column's change does not wake it: it waits its timeout
            assert time.monotonic() - began >= 0.9

            began = time.monotonic()
            woken = asyncio.create_task(changes.wait(RECHECK_SECONDS, never))
            await asyncio.sleep(0.1)
            await pool.execute("UPDATE trials SET preempt_requested = true WHERE id = $1",
                               trial["id"])
            await asyncio.wait_for(woken, 5)
            assert time.monotonic() - began < 5
    finally:
        await watch.close()
        await pool.execute("UPDATE trials SET preempt_requested = false WHERE id = $1",
                           trial["id"])
        await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_a_poll_whose_caller_hung_up_ends(
    live_master: LiveMaster, api: httpx.AsyncClient
) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    allocation_id = f"{experiment['id']}.{trial['id']}.{trial['runId']}"
    watch: PreemptionWatch = live_master.app.state.preemption
    poll = asyncio.create_task(api.get(f"/api/v1/allocations/{allocation_id}/signals/preemption",
                                       params={"timeoutSeconds": 600}))
    try:
        for _ in range(100):
            if watch.waiting(trial["id"]):
                break
            await asyncio.sleep(0.05)
        assert watch.waiting(trial["id"]) == 1
        poll.cancel()  # the client hangs up, as a trial's process that exited does
        for _ in range(100):
            if not watch.waiting(trial["id"]):
                break
            await asyncio.sleep(0.05)
        assert watch.waiting(trial["id"]) == 0
    finally:
        poll.cancel()
        await api.post(f"/api/v1/experiments/{experiment['id']}/kill")

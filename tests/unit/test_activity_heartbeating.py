"""The experiment's end heartbeats while it works (activities/experiment_store.py): its slow
parts (deleting checkpoint files) run in threads, and the beat goes on meanwhile, so the
workflow's heartbeat timeout finds a dead master's activity, not a slow live one."""

from __future__ import annotations

import asyncio
import time

from temporalio.testing import ActivityEnvironment

from activities.experiment_store import heartbeating


def test_heartbeats_go_on_while_a_slow_part_runs_in_a_thread() -> None:
    beats: list[float] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *_: beats.append(time.monotonic())

    async def work() -> None:
        async with heartbeating(0.05):
            await asyncio.to_thread(time.sleep, 0.5)  # a blocking delete

    asyncio.run(env.run(work))
    assert len(beats) >= 5
    count = len(beats)
    time.sleep(0.2)
    assert len(beats) == count  # stopped with the block

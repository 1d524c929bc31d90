"""workflows/allocation.py `released_after`: when a run's slots are given back."""

from __future__ import annotations

import asyncio

import pytest

from workflows.allocation import released_after


class Releases:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


async def test_the_slots_are_released_when_the_block_returns_or_raises() -> None:
    releases = Releases()
    async with released_after(releases):
        pass
    assert releases.count == 1
    with pytest.raises(asyncio.CancelledError):  # an eviction cancels the workflow's tasks
        async with released_after(releases):
            raise asyncio.CancelledError
    assert releases.count == 2


def test_a_closed_coroutine_releases_nothing_and_closes_quietly() -> None:
    """A workflow collected while its run goes on is closed outside its event loop, where the
    release (a workflow call) cannot run: closing must neither call it nor raise."""
    releases = Releases()
    loop = asyncio.new_event_loop()
    try:
        never = loop.create_future()

        async def run() -> None:
            async with released_after(releases):
                await never

        coroutine = run()
        coroutine.send(None)  # suspended in the block, on `never`
        coroutine.close()
    finally:
        loop.close()
    assert releases.count == 0

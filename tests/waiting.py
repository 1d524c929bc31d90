"""Waiting for a condition in a test: every wait has a deadline and says what it waited for.

A test never sleeps for a state to come about; it polls for it, and a wait that runs out fails
with the name of what never happened (and the last value seen), never with a bare timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout: float, what: str, *,
             interval: float = 0.3) -> Any:
    """The first truthy value `check()` returns within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} "
                                 f"(last seen: {value!r})")
        time.sleep(interval)


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str, *,
                     interval: float = 0.1) -> Any:
    """`wait_for` on the running event loop, for an async `check`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} "
                                 f"(last seen: {value!r})")
        await asyncio.sleep(interval)


async def within(awaitable: Awaitable[Any], timeout: float, what: str, *,
                 explain: Callable[[], Awaitable[Any]] | None = None) -> Any:
    """The result of `awaitable` within `timeout` seconds; a wait that runs out fails naming
    `what`, with the state `explain()` reads (the workflow's own view of why it still waits)."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError:
        state = await explain() if explain is not None else None
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}"
                             + (f" (state then: {state!r})" if state is not None else "")) from None

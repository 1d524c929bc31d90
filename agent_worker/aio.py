"""Small asyncio helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def uninterruptible(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end even if the calling task is cancelled meanwhile.

    For clean-up that must finish (stopping a trial's processes, shipping its last logs) and
    that runs while a cancellation is already being handled: a second cancel is ignored here,
    the first one is re-raised by the caller.
    """
    task = asyncio.ensure_future(coro)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
    return task.result()

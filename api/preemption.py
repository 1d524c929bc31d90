"""Wakes the preemption long-polls when their trial's row changes, so that a waiting poll costs
the database nothing.

PostgreSQL notifies channel `trial_preemption` with a trial's id when its `preempt_requested` or
`run_id` changes (migration 0012). One LISTEN connection per master process, opened at the first
poll, wakes the polls that watch that trial; they read the row again. A notification sent while
the connection was down is lost, so polls also read the row every RECHECK_SECONDS, and every
FALLBACK_POLL_SECONDS while there is no connection (the database restarting).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg

log = logging.getLogger(__name__)

CHANNEL = "trial_preemption"
RECHECK_SECONDS = 30.0
FALLBACK_POLL_SECONDS = 0.25
CONNECT_TIMEOUT_SECONDS = 5.0
RECONNECT_DELAY_SECONDS = 5.0


class Changes:
    """One poll's view of its trial: `wait` returns when the row may have changed."""

    def __init__(self, watch: PreemptionWatch) -> None:
        self._watch = watch
        self.event = asyncio.Event()

    async def wait(self, timeout: float, gone: asyncio.Future[object]) -> None:
        """Until a notification, `timeout` s, the recheck interval, or `gone` (the client
        disconnected), whichever is first."""
        interval = RECHECK_SECONDS if await self._watch.listening() else FALLBACK_POLL_SECONDS
        woken: asyncio.Future[object] = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({woken, gone}, timeout=max(0.0, min(timeout, interval)),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        self.event.clear()


class PreemptionWatch:
    """The master's LISTEN connection and the polls waiting on each trial."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        self._waiting: dict[int, set[Changes]] = {}
        self._connecting = asyncio.Lock()
        self._retry_at = 0.0

    @contextlib.asynccontextmanager
    async def watching(self, trial_id: int) -> AsyncIterator[Changes]:
        """Register before reading the row, so that no change between the read and the wait
        is missed."""
        changes = Changes(self)
        self._waiting.setdefault(trial_id, set()).add(changes)
        try:
            yield changes
        finally:
            waiting = self._waiting.get(trial_id)
            if waiting is not None:
                waiting.discard(changes)
                if not waiting:
                    del self._waiting[trial_id]

    def waiting(self, trial_id: int) -> int:
        """How many polls wait on the trial now."""
        return len(self._waiting.get(trial_id, ()))

    async def listening(self) -> bool:
        """Whether notifications arrive now; (re)connects, at most every few seconds."""
        if self._conn is not None and not self._conn.is_closed():
            return True
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            return False
        async with self._connecting:
            if self._conn is not None and not self._conn.is_closed():
                return True
            try:
                conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_SECONDS)
                await conn.add_listener(CHANNEL, self._notified)
            except (OSError, asyncpg.PostgresError, TimeoutError) as err:
                self._retry_at = loop.time() + RECONNECT_DELAY_SECONDS
                log.warning("preemption polls read the database instead of listening: %s", err)
                return False
            self._conn = conn
            return True

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            for changes in self._waiting.get(int(payload), ()):
                changes.event.set()

    async def close(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()
        self._conn = None

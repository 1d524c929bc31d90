"""Trial logs as NDJSON (`{"result": log}` a line, as Determined streams them), maybe followed.

Following polls PostgreSQL for rows newer than the last one sent and stops once the owner (a trial
or an experiment) is terminal and nothing new arrived after that.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg

from api.views import log_json

POLL_SECONDS = 0.3
BATCH = 1000


async def stream_logs(
    pool: asyncpg.Pool,
    where_sql: str,
    owner_id: int,
    *,
    follow: bool,
    is_done: Callable[[], Awaitable[bool]],
) -> AsyncIterator[bytes]:
    """Yield NDJSON lines of task_logs rows matching `where_sql` (which uses $1 = owner_id)."""
    async for log in log_records(pool, where_sql, owner_id, follow=follow, is_done=is_done):
        yield (json.dumps({"result": log}) + "\n").encode()


async def log_records(
    pool: asyncpg.Pool,
    where_sql: str,
    owner_id: int,
    *,
    follow: bool,
    is_done: Callable[[], Awaitable[bool]],
    after_id: int = 0,
) -> AsyncIterator[dict[str, Any]]:
    """Yield task_logs rows matching `where_sql` (ids above `after_id`) as TrialLog JSON, in id
    order: NDJSON and Server-Sent Events both stream these."""
    last_id = after_id
    while True:
        done_before = await is_done() if follow else True
        while True:
            rows = await pool.fetch(
                f"SELECT l.* FROM task_logs l WHERE {where_sql} AND l.id > $2"
                f" ORDER BY l.id LIMIT {BATCH}",
                owner_id,
                last_id,
            )
            for row in rows:
                yield log_json(row)
            if rows:
                last_id = rows[-1]["id"]
            if len(rows) < BATCH:
                break
        if done_before:
            return
        await asyncio.sleep(POLL_SECONDS)

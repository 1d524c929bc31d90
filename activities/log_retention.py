"""Trial logs kept only as long as their retention says: deleted once it has passed.

A trial's retention is in days from its end: its own (`det trial set log-retention`), else its
experiment's (`det experiment set log-retention`), else the cluster's default
(EPOCHAL_LOG_RETENTION_DAYS; Determined's `retention_policy.log_retention_days`). -1 keeps
them for ever (Determined's default); 0 deletes them at the next cleanup. The master cleans up
at start and every EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS (`run_log_retention`), and an admin
at once with `det task cleanup-logs`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import asyncpg

log = logging.getLogger("epochal.log_retention")

FOREVER = -1
MAX_DAYS = 32767  # Determined's bound (a smallint)
# Lines deleted per statement: a large backlog goes in many short transactions, not one.
DELETE_BATCH = 50_000


async def delete_expired_trial_logs(pool: asyncpg.Pool, default_days: int) -> int:
    """Delete the lines of every ended trial whose retention has passed; how many."""
    removed = 0
    while True:
        status: str = await pool.execute(
            "DELETE FROM task_logs WHERE id IN ("
            " SELECT l.id FROM trials t JOIN experiments e ON e.id = t.experiment_id"
            " JOIN task_logs l ON l.trial_id = t.id"
            " WHERE t.end_time IS NOT NULL"
            "  AND coalesce(t.log_retention_days, e.log_retention_days, $1) >= 0"
            "  AND t.end_time <= now() - make_interval("
            "      days => coalesce(t.log_retention_days, e.log_retention_days, $1))"
            " LIMIT $2)",
            default_days, DELETE_BATCH,
        )
        count = int(status.split()[-1])
        removed += count
        if count < DELETE_BATCH:
            return removed


async def run_log_retention(delete: Callable[[], Awaitable[int]], every: float) -> None:
    """Run `delete` now and then every `every` seconds, for ever; a failure (PostgreSQL away)
    is logged and the next round tries again."""
    while True:
        try:
            removed = await delete()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
            log.warning("expired trial logs not deleted this time: %s", err)
        else:
            if removed:
                log.info("deleted %d expired trial log lines", removed)
        await asyncio.sleep(every)

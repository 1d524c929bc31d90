"""Trial logs' retention (activities/log_retention.py deletes what has expired): a trial's own
days, an experiment's for its trials now and later, and a cleanup now (`det task
cleanup-logs`)."""

from __future__ import annotations

import asyncpg

from activities.log_retention import FOREVER, MAX_DAYS, delete_expired_trial_logs
from services.errors import not_found

__all__ = ["FOREVER", "MAX_DAYS", "clean_up_now", "set_experiment_retention",
           "set_trial_retention"]


async def set_trial_retention(pool: asyncpg.Pool, trial_id: int, days: int) -> None:
    """The trial's own log retention."""
    found = await pool.fetchval(
        "UPDATE trials SET log_retention_days = $2 WHERE id = $1 RETURNING id", trial_id, days)
    if found is None:
        raise not_found("trial", trial_id)


async def set_experiment_retention(pool: asyncpg.Pool, experiment_id: int, days: int) -> None:
    """The log retention of every trial of the experiment, and of those it starts later."""
    async with pool.acquire() as conn, conn.transaction():
        found = await conn.fetchval(
            "UPDATE experiments SET log_retention_days = $2 WHERE id = $1 RETURNING id",
            experiment_id, days)
        if found is None:
            raise not_found("experiment", experiment_id)
        await conn.execute(
            "UPDATE trials SET log_retention_days = $2 WHERE experiment_id = $1",
            experiment_id, days)


async def clean_up_now(pool: asyncpg.Pool, default_days: int) -> int:
    """Delete expired trial logs now, not at the master's next round; how many lines."""
    return await delete_expired_trial_logs(pool, default_days)

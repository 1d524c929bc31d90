"""Trial log lines: written in batches as agents ship them, read (a trial's or all of an
experiment's trials') in batches: in the order they were produced (timestamp, then id: the
order they arrived in), or, for a live stream, in id order."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from api.queries import Conn

# Whose lines a read takes: a condition over `task_logs l`, $1 the trial's or experiment's id.
OF_TRIAL = "l.trial_id = $1"
OF_EXPERIMENT = "l.trial_id IN (SELECT id FROM trials WHERE experiment_id = $1)"
# An interactive task's: no trial, $1 the task's id.
OF_TASK = "l.trial_id IS NULL AND l.task_id = $1"


async def fetch_log_batch(
    conn: Conn, of_owner: str, owner_id: int | str, after_id: int, limit: int
) -> list[asyncpg.Record]:
    """The first `limit` lines with ids above `after_id` of the owner `of_owner` names (OF_TRIAL,
    OF_EXPERIMENT or OF_TASK)."""
    return list(await conn.fetch(
        f"SELECT l.* FROM task_logs l WHERE {of_owner} AND l.id > $2"
        f" ORDER BY l.id LIMIT {limit}",
        owner_id,
        after_id,
    ))


async def fetch_last_log_id(conn: Conn, of_owner: str, owner_id: int | str) -> int:
    """The id of the owner's newest line to arrive (0 when it has none)."""
    last: int = await conn.fetchval(
        f"SELECT coalesce(max(l.id), 0) FROM task_logs l WHERE {of_owner}", owner_id)
    return last


async def fetch_ordered_log_batch(
    conn: Conn, of_owner: str, owner_id: int | str, after: tuple[datetime, int] | None,
    upto_id: int, limit: int,
) -> list[asyncpg.Record]:
    """The first `limit` of the owner's lines with ids at most `upto_id`, in the order they were
    produced (timestamp, then id), after the line `after` ((timestamp, id); None: from the
    first). Lines arrive in batches, a master's line at once, so ids alone are not that order."""
    after_time, after_id = after if after is not None else (None, 0)
    return list(await conn.fetch(
        f"SELECT l.* FROM task_logs l WHERE {of_owner} AND l.id <= $2"
        " AND ($3::timestamptz IS NULL OR (l.timestamp, l.id) > ($3, $4))"
        f" ORDER BY l.timestamp, l.id LIMIT {int(limit)}",
        owner_id, upto_id, after_time, after_id,
    ))


async def fetch_experiment_tail_start(conn: Conn, experiment_id: int, tail: int) -> int:
    """The id just before the experiment's last `tail` log lines (0 when it has none)."""
    start: int = await conn.fetchval(
        f"SELECT coalesce(min(id) - 1, 0) FROM (SELECT l.id FROM task_logs l"
        f" WHERE {OF_EXPERIMENT} ORDER BY l.id DESC LIMIT $2) last", experiment_id, tail)
    return start


async def fetch_trial_logs_newest_first(conn: Conn, trial_id: int) -> list[asyncpg.Record]:
    """All of a trial's lines, newest first (`det trial logs --tail N` reads the first N): the
    reverse of the order they were produced in."""
    return list(await conn.fetch(
        "SELECT * FROM task_logs WHERE trial_id = $1 ORDER BY timestamp DESC, id DESC", trial_id
    ))


TaskLogRow = tuple[int, str, str | None, str | None, str | None, str | None, str, datetime]


async def insert_task_logs(conn: Conn, rows: list[TaskLogRow]) -> None:
    """Rows of (trial id, task id, allocation id, agent id, stdtype, level, log, timestamp);
    those of a trial that does not exist (any more) are dropped."""
    await conn.executemany(
        "INSERT INTO task_logs (trial_id, task_id, allocation_id, agent_id, stdtype, level,"
        " log, timestamp) SELECT $1, $2, $3, $4, $5, $6, $7, $8"
        " WHERE EXISTS (SELECT 1 FROM trials WHERE id = $1)",
        rows,
    )


async def insert_master_line(conn: Conn, trial_id: int, task_id: str, allocation_id: str,
                             agent_id: str | None, line: str) -> None:
    """A line the master writes in a trial's log (no stream: stdtype NULL), at INFO."""
    await conn.execute(
        "INSERT INTO task_logs (trial_id, task_id, allocation_id, agent_id, stdtype, level, log,"
        " timestamp) VALUES ($1, $2, $3, $4, NULL, 'INFO', $5, now())",
        trial_id, task_id, allocation_id, agent_id, line)


# An interactive task's lines (a command's, a notebook's ...): trial_id NULL, by the task's id.
TaskLineRow = tuple[str, str | None, str | None, str | None, str | None, str, datetime]


async def insert_task_lines(conn: Conn, rows: list[TaskLineRow]) -> None:
    """Rows of (task id, allocation id, agent id, stdtype, level, log, timestamp); those of a
    task that does not exist (any more) are dropped."""
    await conn.executemany(
        "INSERT INTO task_logs (trial_id, task_id, allocation_id, agent_id, stdtype, level,"
        " log, timestamp) SELECT NULL, $1, $2, $3, $4, $5, $6, $7"
        " WHERE EXISTS (SELECT 1 FROM tasks WHERE id = $1)",
        rows,
    )


async def fetch_task_lines_newest_first(conn: Conn, task_id: str, before_id: int,
                                        limit: int) -> list[asyncpg.Record]:
    """At most `limit` of a task's lines below `before_id` (0: from the newest), newest first
    (`det task logs --tail N` reads the first N)."""
    return list(await conn.fetch(
        "SELECT * FROM task_logs WHERE task_id = $1 AND trial_id IS NULL"
        " AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3", task_id, before_id, limit))

"""The cluster's own: whether its database answers, and the message it shows every user."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from api.queries import Conn


async def ping(conn: Conn) -> None:
    """Fails if the database does not answer (the master's health check)."""
    await conn.fetchval("SELECT 1")


# -- the cluster-wide message ------------------------------------------------------------------

KEPT_MESSAGES = 100  # rows kept: the newest (older ones have ended and nobody reads them)
_MESSAGE_COLUMNS = "message, start_time, end_time, created_at"


async def fetch_cluster_message(conn: Conn, *, shown_now: bool) -> asyncpg.Record | None:
    """The newest message unless it has ended; with `shown_now`, only if it has started too."""
    return await conn.fetchrow(
        f"SELECT {_MESSAGE_COLUMNS} FROM (SELECT * FROM cluster_messages"
        " ORDER BY created_at DESC, id DESC LIMIT 1) newest"
        " WHERE (end_time IS NULL OR end_time > now()) AND (NOT $1 OR start_time <= now())",
        shown_now)


async def end_cluster_messages(conn: Conn) -> None:
    """End the message shown or waiting to be (`det master cluster-message clear`)."""
    await conn.execute(
        "UPDATE cluster_messages SET end_time = now() WHERE end_time IS NULL OR end_time > now()")


async def set_cluster_message(conn: asyncpg.Connection, *, message: str, created_by: int | None,
                              start: datetime, end: datetime | None) -> None:
    """The new message in place of any other (the caller holds a transaction)."""
    await conn.execute("LOCK TABLE cluster_messages IN SHARE ROW EXCLUSIVE MODE")
    await end_cluster_messages(conn)
    await conn.execute(
        "INSERT INTO cluster_messages (message, created_by, start_time, end_time)"
        " VALUES ($1, $2, $3, $4)", message, created_by, start, end)
    await conn.execute(
        "DELETE FROM cluster_messages WHERE id NOT IN"
        " (SELECT id FROM cluster_messages ORDER BY id DESC LIMIT $1)", KEPT_MESSAGES)

"""The cluster's own: whether its database answers."""

from __future__ import annotations

from api.queries import Conn


async def ping(conn: Conn) -> None:
    """Fails if the database does not answer (the master's health check)."""
    await conn.fetchval("SELECT 1")

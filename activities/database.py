"""The PostgreSQL connection pool and the versioned schema migrations.

Migrations are plain SQL files (`migrations/NNNN_name.sql`) applied in order, each in its own
transaction, under an advisory lock so that two masters starting at once do not race.
"""

from __future__ import annotations

import json
from importlib import resources

import asyncpg

_MIGRATION_LOCK = 7_261_001  # arbitrary, fixed: the advisory lock id for migrations


async def _init_connection(conn: asyncpg.Connection) -> None:
    for pg_type in ("json", "jsonb"):
        await conn.set_type_codec(
            pg_type, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _no_reset_query(conn: asyncpg.Connection) -> None:
    """On release asyncpg always rolls back an open transaction; its default reset query on
    top (advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL) is a round trip per use, for
    session state this pool's users never leave behind (the LISTEN connection is not the
    pool's; the migrations' advisory lock is released where it is taken)."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool whose connections read and write json/jsonb as Python objects."""
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection,
        reset=_no_reset_query,
    )
    assert pool is not None
    return pool


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration shipped with Epochal, oldest first."""
    found = []
    for entry in resources.files("activities.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text()))
    return sorted(found)


async def apply_migrations(pool: asyncpg.Pool) -> list[str]:
    """Bring the schema up to date; returns the names of the migrations applied now."""
    applied_now: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for version, name, sql in migration_files():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                        version,
                        name,
                    )
                applied_now.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
    return applied_now

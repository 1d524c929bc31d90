"""Config templates, kept by name."""

from __future__ import annotations

from typing import Any

import asyncpg

from api.queries import Conn


async def fetch_template(conn: Conn, name: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM templates WHERE name = $1", name)


async def fetch_templates(
    conn: Conn, name: str | None, workspace_ids: list[int] | None, *, descending: bool
) -> list[asyncpg.Record]:
    """Templates whose name holds `name` (regardless of case) in any of `workspace_ids`, by
    name; None matches any."""
    direction = "DESC" if descending else "ASC"
    return list(await conn.fetch(
        "SELECT * FROM templates WHERE ($1::text IS NULL OR strpos(lower(name), lower($1)) > 0)"
        " AND ($2::int[] IS NULL OR workspace_id = ANY($2))"
        f" ORDER BY name {direction}",
        name, workspace_ids,
    ))


async def insert_template(
    conn: Conn, name: str, config: dict[str, Any], workspace_id: int, owner: str
) -> asyncpg.Record | None:
    """The new template; None when the name is taken."""
    return await conn.fetchrow(
        "INSERT INTO templates (name, config, workspace_id, owner) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (name) DO NOTHING RETURNING *", name, config, workspace_id, owner)


async def upsert_template(
    conn: Conn, name: str, config: dict[str, Any], workspace_id: int, owner: str
) -> asyncpg.Record:
    """The template, created or with its config replaced (its workspace and owner stay)."""
    return await conn.fetchrow(
        "INSERT INTO templates (name, config, workspace_id, owner) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (name) DO UPDATE SET config = excluded.config RETURNING *",
        name, config, workspace_id, owner)


async def update_template_config(conn: Conn, name: str, config: Any) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "UPDATE templates SET config = $2 WHERE name = $1 RETURNING *", name, config)


async def delete_template(conn: Conn, name: str) -> None:
    await conn.execute("DELETE FROM templates WHERE name = $1", name)

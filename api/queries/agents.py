"""Agents as they registered: their pool, slots, boot and whether they take work."""

from __future__ import annotations

from typing import Any

import asyncpg

from api.queries import Conn


async def fetch_agent_boot(conn: Conn, agent_id: str) -> asyncpg.Record | None:
    """The agent's last boot id and enabled flag, to tell a new boot from a heartbeat."""
    return await conn.fetchrow("SELECT boot_id, enabled FROM agents WHERE id = $1", agent_id)


async def upsert_agent(
    conn: Conn,
    agent_id: str,
    resource_pool: str,
    slots: list[dict[str, Any]],
    version: str | None,
    boot_id: str,
    run_ports: list[dict[str, int]],
    addresses: list[str],
) -> None:
    """Register the agent, or record its heartbeat (last seen now) and its runs' ports."""
    await conn.execute(
        "INSERT INTO agents (id, resource_pool, slots, version, boot_id, run_ports, addresses)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)"
        " ON CONFLICT (id) DO UPDATE SET resource_pool = EXCLUDED.resource_pool,"
        "   slots = EXCLUDED.slots, version = EXCLUDED.version, boot_id = EXCLUDED.boot_id,"
        "   run_ports = EXCLUDED.run_ports, addresses = EXCLUDED.addresses, last_seen = now()",
        agent_id,
        resource_pool,
        slots,
        version,
        boot_id,
        run_ports,
        addresses,
    )


async def fetch_peer_run_ports(
    conn: Conn, agent_id: str, alive_seconds: int
) -> list[dict[str, Any]]:
    """The ports runs listen on at every other agent seen within `alive_seconds`: one entry
    per address of its host (`address`, `port`, `uid`)."""
    rows = await conn.fetch(
        "SELECT DISTINCT address.value #>> '{}' AS address, (port.value->>'port')::int AS port,"
        "   (port.value->>'uid')::bigint AS uid"
        " FROM agents, jsonb_array_elements(addresses) AS address,"
        "   jsonb_array_elements(run_ports) AS port"
        " WHERE id <> $1 AND last_seen > now() - make_interval(secs => $2)"
        " ORDER BY 1, 2, 3",
        agent_id,
        alive_seconds,
    )
    return [dict(row) for row in rows]


async def fetch_agents(
    conn: Conn, alive_seconds: int, agent_id: str | None = None
) -> list[asyncpg.Record]:
    """All agents by id (or the one named), `alive` if seen within `alive_seconds`."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT *, last_seen > now() - make_interval(secs => $1) AS alive FROM agents"
        " WHERE $2::text IS NULL OR id = $2 ORDER BY id",
        alive_seconds,
        agent_id,
    )
    return rows


async def set_agent_enabled(conn: Conn, agent_id: str, enabled: bool) -> str | None:
    """The agent's resource pool, or None if there is no such agent."""
    pool_name: str | None = await conn.fetchval(
        "UPDATE agents SET enabled = $2 WHERE id = $1 RETURNING resource_pool", agent_id, enabled
    )
    return pool_name

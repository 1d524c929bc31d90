"""Workspaces and projects, with the counts Determined's v1Workspace and v1Project carry."""

from __future__ import annotations

from typing import Literal

import asyncpg

from api.queries import Conn
from common.states import TERMINAL_STATES, ExperimentState

# An experiment not ended yet: what a project counts as active.
ACTIVE_STATES = tuple(state.value for state in ExperimentState if state not in TERMINAL_STATES)

_WORKSPACE_SELECT = """
SELECT w.*, coalesce((SELECT id FROM users WHERE username = w.owner), 1) AS user_id,
       (SELECT count(*) FROM projects p WHERE p.workspace_id = w.id) AS num_projects,
       (SELECT count(*) FROM experiments e JOIN projects p ON p.id = e.project_id
        WHERE p.workspace_id = w.id) AS num_experiments
FROM workspaces w
"""

_PROJECT_SELECT = """
SELECT p.*, w.name AS workspace_name,
       coalesce((SELECT id FROM users WHERE username = p.owner), 1) AS user_id,
       (SELECT count(*) FROM experiments e WHERE e.project_id = p.id) AS num_experiments,
       (SELECT count(*) FROM experiments e WHERE e.project_id = p.id
        AND e.state = ANY($1::text[])) AS num_active,
       (SELECT max(e.start_time) FROM experiments e WHERE e.project_id = p.id) AS last_started
FROM projects p JOIN workspaces w ON w.id = p.workspace_id
"""

Table = Literal["workspaces", "projects"]


def _order_by(column: str, descending: bool) -> str:
    return f" ORDER BY {column} {'DESC' if descending else 'ASC'}"


# -- workspaces ------------------------------------------------------------------------------

async def fetch_workspace(conn: Conn, workspace_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(_WORKSPACE_SELECT + " WHERE w.id = $1", workspace_id)


async def fetch_workspaces(
    conn: Conn, name: str | None, exact_name: str | None, archived: bool | None,
    *, by_name: bool, descending: bool,
) -> list[asyncpg.Record]:
    """`name` matches regardless of case, `exact_name` exactly; None matches any."""
    where = (" WHERE ($1::text IS NULL OR lower(w.name) = lower($1))"
             " AND ($2::text IS NULL OR w.name = $2) AND ($3::boolean IS NULL OR w.archived = $3)")
    order = _order_by("w.name" if by_name else "w.id", descending)
    return list(await conn.fetch(_WORKSPACE_SELECT + where + order, name, exact_name, archived))


async def fetch_workspace_creator(conn: Conn, workspace_id: int) -> asyncpg.Record | None:
    """The user who made the workspace (none for workspace 1, which no one made), with the
    columns of api/queries/users.py's USER_COLUMNS."""
    return await conn.fetchrow(
        "SELECT u.id, u.username, u.display_name, u.admin, u.active, u.modified_at,"
        " u.agent_uid, u.agent_gid, u.agent_user, u.agent_group"
        " FROM workspaces w JOIN users u ON u.username = w.owner"
        " WHERE w.id = $1 AND NOT w.immutable", workspace_id)


async def workspace_exists(conn: Conn, workspace_id: int) -> bool:
    return await conn.fetchval("SELECT 1 FROM workspaces WHERE id = $1", workspace_id) is not None


async def fetch_workspace_id(conn: Conn, name: str) -> int | None:
    """The id of the workspace named `name`."""
    found = await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", name)
    return None if found is None else int(found)


async def insert_workspace(conn: Conn, name: str, owner: str | None,
                           compute_pool: str | None = None,
                           aux_pool: str | None = None) -> int | None:
    """The new workspace's id; None when the name is taken."""
    workspace_id = await conn.fetchval(
        "INSERT INTO workspaces (name, owner, default_compute_pool, default_aux_pool)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING RETURNING id",
        name, owner, compute_pool, aux_pool)
    return None if workspace_id is None else int(workspace_id)


async def update_workspace(conn: Conn, workspace_id: int, *, name: str | None,
                           compute_pool: str | None, aux_pool: str | None,
                           max_slots: int | None, set_max_slots: bool) -> None:
    """Set the fields given: None keeps a name or default pool ("" clears a pool); the slot
    cap is set (None: no cap) only with `set_max_slots`."""
    await conn.execute(
        "UPDATE workspaces SET name = coalesce($2, name),"
        " default_compute_pool = CASE WHEN $3::text IS NULL THEN default_compute_pool"
        "   ELSE nullif($3, '') END,"
        " default_aux_pool = CASE WHEN $4::text IS NULL THEN default_aux_pool"
        "   ELSE nullif($4, '') END,"
        " max_slots = CASE WHEN $6 THEN $5::int ELSE max_slots END"
        " WHERE id = $1",
        workspace_id, name, compute_pool, aux_pool, max_slots, set_max_slots)


async def count_models_in_workspace(conn: Conn, workspace_id: int) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM models WHERE workspace_id = $1",
                                   workspace_id))


# -- projects --------------------------------------------------------------------------------

async def fetch_project(conn: Conn, project_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(_PROJECT_SELECT + " WHERE p.id = $2", ACTIVE_STATES, project_id)


async def fetch_projects(
    conn: Conn, workspace_id: int, name: str | None, archived: bool | None,
    *, by_name: bool, descending: bool,
) -> list[asyncpg.Record]:
    """Workspace 0 matches every workspace, None any name or archived state."""
    where = (" WHERE ($2::int = 0 OR p.workspace_id = $2) AND ($3::text IS NULL OR p.name = $3)"
             " AND ($4::boolean IS NULL OR p.archived = $4)")
    order = _order_by("p.name" if by_name else "p.id", descending)
    return list(await conn.fetch(_PROJECT_SELECT + where + order,
                                 ACTIVE_STATES, workspace_id, name, archived))


async def project_name_taken(conn: Conn, workspace_id: int, name: str) -> bool:
    return bool(await conn.fetchval(
        "SELECT 1 FROM projects WHERE workspace_id = $1 AND name = $2", workspace_id, name))


async def project_key_taken(conn: Conn, key: str) -> bool:
    return bool(await conn.fetchval("SELECT 1 FROM projects WHERE key = $1", key))


async def fetch_project_keys(conn: Conn, stem: str) -> set[str]:
    """The project keys starting with `stem`."""
    rows = await conn.fetch("SELECT key FROM projects WHERE key LIKE $1 || '%'", stem)
    return {r["key"] for r in rows}


async def insert_project(
    conn: Conn, workspace_id: int, name: str, key: str, description: str, owner: str | None
) -> int:
    return int(await conn.fetchval(
        "INSERT INTO projects (workspace_id, name, key, description, owner)"
        " VALUES ($1, $2, $3, $4, $5) RETURNING id",
        workspace_id, name, key, description, owner))


async def update_project(
    conn: Conn, project_id: int, name: str | None, description: str | None, key: str | None
) -> None:
    """Set the fields given; None keeps a field."""
    await conn.execute(
        "UPDATE projects SET name = coalesce($2, name), description = coalesce($3,"
        " description), key = coalesce($4, key) WHERE id = $1",
        project_id, name, description, key)


# -- either ----------------------------------------------------------------------------------

async def set_archived(conn: Conn, table: Table, item_id: int, archived: bool) -> None:
    await conn.execute(
        f"UPDATE {table} SET archived = $2 WHERE id = $1",  # noqa: S608 (a fixed name)
        item_id, archived)


async def delete_row(conn: Conn, table: Table, item_id: int) -> None:
    await conn.execute(f"DELETE FROM {table} WHERE id = $1", item_id)  # noqa: S608 (a fixed name)

"""Interactive tasks (commands, notebooks, shells, TensorBoards): their rows, as the API creates,
lists and kills them, the proxy finds them, and agents launch them and say they are ready."""

from __future__ import annotations

from typing import Literal

import asyncpg

from api.queries import Conn
from common.states import TaskState, sql_list

# The columns every answer about a task reads (never the context's bytes nor the secrets).
_TASK_COLUMNS = (
    "t.id, t.task_type, t.owner_id, u.username, t.workspace_id, t.description, t.config,"
    " t.state, t.exit_status, t.resource_pool, t.slots, t.priority, t.agent_id,"
    " t.proxy_address, t.ready, t.agent_user, t.experiment_ids, t.trial_ids, t.created_at,"
    " t.started_at, t.ended_at, t.last_activity, t.context IS NOT NULL AS has_context"
)


async def fetch_task(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """One task with its owner's name (no context bytes, no secrets)."""
    return await conn.fetchrow(
        f"SELECT {_TASK_COLUMNS} FROM tasks t JOIN users u ON u.id = t.owner_id"
        " WHERE t.id = $1", task_id)


async def fetch_tasks(conn: Conn, *, task_type: str | None, usernames: list[str] | None,
                      workspace_id: int | None, limit: int) -> list[asyncpg.Record]:
    """Tasks, oldest first, of a type (None: every type), of these users (None: everyone's),
    in a workspace (None: any); at most `limit`."""
    return list(await conn.fetch(
        f"SELECT {_TASK_COLUMNS} FROM tasks t JOIN users u ON u.id = t.owner_id"
        " WHERE ($1::text IS NULL OR t.task_type = $1)"
        " AND ($2::text[] IS NULL OR u.username = ANY($2))"
        " AND ($3::int IS NULL OR t.workspace_id = $3)"
        " ORDER BY t.created_at, t.id LIMIT $4",
        task_type, usernames, workspace_id, limit))


async def fetch_active_tasks(conn: Conn) -> list[asyncpg.Record]:
    """Tasks not terminated yet (the job queue and the cluster page list them)."""
    return list(await conn.fetch(
        f"SELECT {_TASK_COLUMNS} FROM tasks t JOIN users u ON u.id = t.owner_id"
        f" WHERE t.state <> '{TaskState.TERMINATED}' ORDER BY t.created_at, t.id"))


async def fetch_task_owner(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """The owner's id and name, and the state (who may read, kill or reach a task)."""
    return await conn.fetchrow(
        "SELECT t.owner_id, u.username, t.state, t.task_type FROM tasks t"
        " JOIN users u ON u.id = t.owner_id WHERE t.id = $1", task_id)


async def fetch_proxy_target(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """What the master's proxy needs: owner, type, state, where the service listens and the
    credential it sends there."""
    return await conn.fetchrow(
        "SELECT t.owner_id, u.username, t.task_type, t.state, t.proxy_address, t.ready,"
        " t.secret FROM tasks t JOIN users u ON u.id = t.owner_id WHERE t.id = $1", task_id)


async def touch_task(conn: Conn, task_id: str) -> None:
    """A request went through the proxy; written at most every few seconds per task."""
    await conn.execute(
        "UPDATE tasks SET last_activity = now() WHERE id = $1"
        " AND last_activity < now() - interval '5 seconds'", task_id)


async def fetch_task_launch(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """What an agent needs to start the task (secrets included: agents only)."""
    return await conn.fetchrow(
        "SELECT t.id, t.task_type, t.owner_id, u.username, t.config, t.secret, t.public_key,"
        " t.experiment_ids, t.trial_ids, t.state, t.context IS NOT NULL AS has_context"
        " FROM tasks t JOIN users u ON u.id = t.owner_id WHERE t.id = $1", task_id)


async def fetch_task_context(conn: Conn, task_id: str) -> bytes | None:
    context: bytes | None = await conn.fetchval(
        "SELECT context FROM tasks WHERE id = $1", task_id)
    return context


async def set_task_ready(conn: Conn, task_id: str, proxy_address: str | None,
                         agent_user: str | None = None) -> bool:
    """The agent says the task's service answers at `proxy_address` (None: a command, which
    serves nothing) and runs as `agent_user`; its idle time counts from now. False when the task
    is over (a late report)."""
    row = await conn.fetchval(
        "UPDATE tasks SET ready = true, proxy_address = $2, agent_user = $3,"
        f" state = '{TaskState.RUNNING}', last_activity = now() WHERE id = $1 AND state IN"
        f" ({sql_list((TaskState.QUEUED, TaskState.STARTING, TaskState.RUNNING))}) RETURNING id",
        task_id, proxy_address, agent_user)
    return row is not None


async def fetch_shell_keys(conn: Conn, task_id: str) -> asyncpg.Record | None:
    """A shell's key pair (what `det shell open` connects with: its owner's and admins' only)."""
    return await conn.fetchrow(
        "SELECT public_key, private_key FROM tasks WHERE id = $1", task_id)


async def set_task_priority(conn: Conn, task_id: str, priority: int) -> bool:
    """A new priority for a task not over yet, in its row and its config; False otherwise."""
    row = await conn.fetchval(
        "UPDATE tasks SET priority = $2, config = jsonb_set(config, '{resources,priority}',"
        f" to_jsonb($2::int)) WHERE id = $1 AND state <> '{TaskState.TERMINATED}' RETURNING id",
        task_id, priority)
    return row is not None


async def fetch_missing_ids(conn: Conn, table: Literal["experiments", "trials"],
                            ids: list[int]) -> list[int]:
    """Which of the ids no row of `table` has (a TensorBoard's experiments or trials)."""
    return [r["id"] for r in await conn.fetch(
        "SELECT id FROM unnest($1::int[]) AS given(id)"
        f" WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.id = given.id) ORDER BY id", ids)]

"""Who owns what a route's path names: the user a change to it needs (api/access.py)."""

from __future__ import annotations

import uuid

from api.queries import Conn


async def experiment_owner(conn: Conn, experiment_id: int) -> str | None:
    owner: str | None = await conn.fetchval(
        "SELECT owner FROM experiments WHERE id = $1", experiment_id)
    return owner


async def trial_owner(conn: Conn, trial_id: int) -> str | None:
    owner: str | None = await conn.fetchval(
        "SELECT e.owner FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.id = $1", trial_id)
    return owner


async def trial_experiment(conn: Conn, trial_id: int) -> int | None:
    experiment_id: int | None = await conn.fetchval(
        "SELECT experiment_id FROM trials WHERE id = $1", trial_id)
    return experiment_id


async def checkpoint_owner(conn: Conn, checkpoint_uuid: str) -> str | None:
    try:
        key = uuid.UUID(checkpoint_uuid)
    except ValueError:
        return None  # the route answers that it is no checkpoint id
    owner: str | None = await conn.fetchval(
        "SELECT e.owner FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
        " JOIN experiments e ON e.id = t.experiment_id WHERE c.uuid = $1", key)
    return owner


async def task_owner(conn: Conn, task_id: str) -> str | None:
    owner: str | None = await conn.fetchval(
        "SELECT u.username FROM tasks t JOIN users u ON u.id = t.owner_id WHERE t.id = $1",
        task_id)
    return owner


async def workspace_owner(conn: Conn, workspace_id: int) -> str | None:
    owner: str | None = await conn.fetchval(
        "SELECT owner FROM workspaces WHERE id = $1", workspace_id)
    return owner


async def project_owner(conn: Conn, project_id: int) -> str | None:
    owner: str | None = await conn.fetchval(
        "SELECT owner FROM projects WHERE id = $1", project_id)
    return owner


async def template_owner(conn: Conn, name: str) -> str | None:
    owner: str | None = await conn.fetchval("SELECT owner FROM templates WHERE name = $1", name)
    return owner


async def model_owner(conn: Conn, identifier: str) -> str | None:
    """By name, or by id when all digits (Determined's rule, as api/queries/models.py)."""
    column = "id = $1::text::int" if identifier.isdigit() else "name = $1"
    owner: str | None = await conn.fetchval(
        f"SELECT owner FROM models WHERE {column}", identifier)
    return owner


async def username(conn: Conn, user_id: int) -> str | None:
    name: str | None = await conn.fetchval("SELECT username FROM users WHERE id = $1", user_id)
    return name

"""The model registry: models, their numbered versions, and the checkpoints those point at."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import asyncpg

from api.queries import Conn

_MODEL_SELECT = """
SELECT m.*, coalesce((SELECT id FROM users WHERE username = m.owner), 0) AS user_id,
       (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS num_versions,
       (SELECT max(version) FROM model_versions v WHERE v.model_id = m.id) AS latest_version
FROM models m
"""
_MODELS_WHERE = (
    " WHERE ($1::text IS NULL OR strpos(lower(m.name), lower($1)) > 0)"
    " AND ($2::text IS NULL OR strpos(lower(m.description), lower($2)) > 0)"
    " AND ($3::int IS NULL OR m.id = $3) AND ($4::bool IS NULL OR m.archived = $4)"
    " AND ($5::text[] IS NULL OR m.labels @> $5)"
    " AND ($6::text[] IS NULL OR m.owner = ANY($6)"
    "      OR m.owner IN (SELECT username FROM users WHERE id = ANY($7)))"
    " AND ($8::int[] IS NULL OR m.workspace_id = ANY($8)"
    "      OR m.workspace_id IN (SELECT id FROM workspaces WHERE name = ANY($9)))"
)
_VERSION_SELECT = (
    "SELECT v.*, coalesce((SELECT id FROM users WHERE username = v.owner), 0) AS user_id"
    " FROM model_versions v"
)

# Determined's sortBy names, and what they sort on.
MODEL_SORTS = {
    "SORT_BY_UNSPECIFIED": "m.updated_at", "SORT_BY_NAME": "m.name",
    "SORT_BY_DESCRIPTION": "m.description", "SORT_BY_CREATION_TIME": "m.created_at",
    "SORT_BY_LAST_UPDATED_TIME": "m.updated_at", "SORT_BY_NUM_VERSIONS": "num_versions",
    "SORT_BY_WORKSPACE": "m.workspace_id",
    # Epochal's: the dashboard sorts by each column it shows.
    "SORT_BY_LATEST_VERSION": "latest_version", "SORT_BY_OWNER": "m.owner",
}
VERSION_SORTS = {"SORT_BY_UNSPECIFIED": "version", "SORT_BY_VERSION": "version",
                 "SORT_BY_CREATION_TIME": "created_at"}


class ModelFilter(NamedTuple):
    """GetModels' filters: None matches any. A model matches `users` or `user_ids`, and
    `workspace_ids` or `workspace_names` (an empty list matches none)."""

    name: str | None
    description: str | None
    id: int | None
    archived: bool | None
    labels: list[str] | None
    users: list[str] | None
    user_ids: list[int]
    workspace_ids: list[int] | None
    workspace_names: list[str]


def _direction(descending: bool) -> str:
    return "DESC" if descending else "ASC"


# -- models ----------------------------------------------------------------------------------

async def fetch_model(conn: Conn, identifier: str, *, lock: bool = False) -> asyncpg.Record | None:
    """A model by name, or by id when `identifier` is all digits (Determined's rule); `lock`
    holds its row until the transaction ends."""
    column = "m.id = $1::text::int" if identifier.isdigit() else "m.name = $1"
    return await conn.fetchrow(
        f"{_MODEL_SELECT} WHERE {column}{' FOR UPDATE OF m' if lock else ''}", identifier)


async def count_models(conn: Conn, where: ModelFilter) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM models m" + _MODELS_WHERE, *where))


async def fetch_models(
    conn: Conn, where: ModelFilter, sort_by: str, *, descending: bool, limit: int, offset: int
) -> list[asyncpg.Record]:
    """A page of the models matching `where`, sorted by the MODEL_SORTS name `sort_by`."""
    return list(await conn.fetch(
        f"{_MODEL_SELECT}{_MODELS_WHERE} ORDER BY {MODEL_SORTS[sort_by]}"
        f" {_direction(descending)}, m.id LIMIT {limit} OFFSET $10", *where, offset))


async def fetch_model_labels(conn: Conn, workspace_id: int | None) -> list[str]:
    """Every label in use (in the workspace, unless None), most used first."""
    rows = await conn.fetch(
        "SELECT label FROM models, unnest(labels) AS label"
        " WHERE $1::int IS NULL OR workspace_id = $1"
        " GROUP BY label ORDER BY count(*) DESC, label LIMIT 10000", workspace_id)
    return [r["label"] for r in rows]


async def insert_model(
    conn: Conn, name: str, description: str, notes: str, metadata: dict[str, Any],
    labels: list[str], owner: str | None, workspace_id: int,
) -> int:
    return int(await conn.fetchval(
        "INSERT INTO models (name, description, notes, metadata, labels, owner, workspace_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        name, description, notes, metadata, labels, owner, workspace_id))


async def update_model(
    conn: Conn, model_id: int, name: str | None, description: str | None, notes: str | None,
    metadata: dict[str, Any] | None, labels: list[str] | None, workspace_id: int | None,
) -> None:
    """Set the fields given; None keeps a field."""
    await conn.execute(
        "UPDATE models SET name = coalesce($2, name),"
        " description = coalesce($3, description), notes = coalesce($4, notes),"
        " metadata = coalesce($5, metadata), labels = coalesce($6, labels),"
        " workspace_id = coalesce($7, workspace_id), updated_at = now() WHERE id = $1",
        model_id, name, description, notes, metadata, labels, workspace_id)


async def move_model(conn: Conn, model_id: int, workspace_id: int | None) -> None:
    await conn.execute("UPDATE models SET workspace_id = $2, updated_at = now() WHERE id = $1",
                       model_id, workspace_id)


async def set_model_archived(conn: Conn, model_id: int, archived: bool) -> None:
    await conn.execute("UPDATE models SET archived = $2, updated_at = now() WHERE id = $1",
                       model_id, archived)


async def touch_model(conn: Conn, model_id: int) -> None:
    """Mark the model updated now (a version was registered)."""
    await conn.execute("UPDATE models SET updated_at = now() WHERE id = $1", model_id)


async def delete_model(conn: Conn, model_id: int) -> None:
    """Delete the model with its versions (their checkpoints stay)."""
    await conn.execute("DELETE FROM models WHERE id = $1", model_id)


# -- versions --------------------------------------------------------------------------------

async def fetch_version(conn: Conn, model_id: int, version: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"{_VERSION_SELECT} WHERE v.model_id = $1 AND v.version = $2", model_id, version)


async def fetch_versions(
    conn: Conn, model_id: int, sort_by: str, *, descending: bool, limit: int, offset: int
) -> list[asyncpg.Record]:
    """A page of the model's versions, sorted by the VERSION_SORTS name `sort_by`."""
    return list(await conn.fetch(
        f"{_VERSION_SELECT} WHERE v.model_id = $1 ORDER BY {VERSION_SORTS[sort_by]}"
        f" {_direction(descending)}, v.id LIMIT {limit} OFFSET $2", model_id, offset))


async def lock_checkpoint_state(conn: asyncpg.Connection, checkpoint_uuid: uuid.UUID) -> str | None:
    """The checkpoint's state, its row share-locked until the transaction ends so that GC cannot
    delete it meanwhile; None if there is no such checkpoint."""
    state = await conn.fetchval(
        "SELECT state FROM checkpoints WHERE uuid = $1 FOR SHARE", checkpoint_uuid)
    return None if state is None else str(state)


async def insert_version(
    conn: Conn, model_id: int, checkpoint_uuid: uuid.UUID, name: str, comment: str, notes: str,
    metadata: dict[str, Any], labels: list[str], owner: str,
) -> int:
    """The model's next version number, now registered."""
    return int(await conn.fetchval(
        "INSERT INTO model_versions (model_id, version, checkpoint_uuid, name, comment, notes,"
        " metadata, labels, owner) VALUES ($1, (SELECT coalesce(max(version), 0) + 1 FROM"
        " model_versions WHERE model_id = $1), $2, $3, $4, $5, $6, $7, $8) RETURNING version",
        model_id, checkpoint_uuid, name, comment, notes, metadata, labels, owner))


async def update_version(
    conn: Conn, version_id: int, name: str | None, comment: str | None, notes: str | None,
    metadata: dict[str, Any] | None, labels: list[str] | None,
) -> None:
    """Set the fields given; None keeps a field."""
    await conn.execute(
        "UPDATE model_versions SET name = coalesce($2, name), comment = coalesce($3, comment),"
        " notes = coalesce($4, notes), metadata = coalesce($5, metadata),"
        " labels = coalesce($6, labels), updated_at = now() WHERE id = $1",
        version_id, name, comment, notes, metadata, labels)


async def delete_version(conn: Conn, version_id: int) -> None:
    await conn.execute("DELETE FROM model_versions WHERE id = $1", version_id)

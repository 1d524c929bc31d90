"""The one home of the mapping (source, kind, Determined id) -> local id (import_objects), the
sources themselves, and what every kind's import answers per item."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import asyncpg

from services.errors import Invalid, not_found

Conn: TypeAlias = asyncpg.Pool | asyncpg.Connection

# The kinds kept in import_objects, and the table and key column (with its type) of each, so a
# mapping whose local row was deleted since is known stale and the object imported again.
LOCAL_ROWS: dict[str, tuple[str, str, str]] = {
    "user": ("users", "id", "int"),
    "workspace": ("workspaces", "id", "int"),
    "project": ("projects", "id", "int"),
    "template": ("templates", "name", "text"),
    "experiment": ("experiments", "id", "int"),
    "trial": ("trials", "id", "int"),
    "checkpoint": ("checkpoints", "uuid", "uuid"),
    "model": ("models", "id", "int"),
    "model-version": ("model_versions", "id", "int"),
    "trial-logs": ("trials", "id", "int"),
}
# The POST routes' plural kinds (and GET ?kind= takes either) to the kinds stored.
KIND_OF = {"users": "user", "workspaces": "workspace", "projects": "project",
           "templates": "template", "experiments": "experiment", "trials": "trial",
           "checkpoints": "checkpoint", "models": "model", "model-versions": "model-version",
           **{kind: kind for kind in LOCAL_ROWS}}
MAX_OBJECTS_PAGE = 10_000


@dataclass
class Result:
    """What became of one item: its local id, or why nothing was written."""

    external_id: str
    local_id: str | None = None
    created: bool = False
    skipped: str | None = None
    warnings: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return {"externalId": self.external_id, "localId": self.local_id,
                "created": self.created, "skipped": self.skipped, "warnings": self.warnings}


def stored_kind(kind: str, where: str = "kind") -> str:
    if kind not in KIND_OF:
        raise Invalid("unknown kind of imported object",
                      [f"{where}: {kind[:50]!r} is none of {', '.join(sorted(KIND_OF))}"])
    return KIND_OF[kind]


async def register_source(pool: asyncpg.Pool, *, url: str, cluster_id: str, cluster_name: str,
                          version: str) -> tuple[int, bool]:
    """The source cluster's id here (one per clusterId: a second call updates its url, name and
    version) and whether it is new."""
    row = await pool.fetchrow(
        "INSERT INTO import_sources (cluster_id, cluster_name, url, version)"
        " VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (cluster_id) DO UPDATE SET url = EXCLUDED.url,"
        "  cluster_name = EXCLUDED.cluster_name, version = EXCLUDED.version,"
        "  last_import_at = now()"
        " RETURNING id, (xmax = 0) AS created", cluster_id, cluster_name, url, version)
    return int(row["id"]), bool(row["created"])


async def require_source(conn: Conn, source_id: int) -> asyncpg.Record:
    row = await conn.fetchrow("SELECT * FROM import_sources WHERE id = $1", source_id)
    if row is None:
        raise not_found("import source", source_id)
    return row


async def local_id(conn: Conn, source_id: int, kind: str, external_id: object) -> str | None:
    """The local id of what the source named, if it was imported and is still here."""
    found: str | None = await conn.fetchval(
        "SELECT local_id FROM import_objects WHERE source_id = $1 AND kind = $2"
        " AND external_id = $3", source_id, kind, str(external_id))
    if found is None:
        return None
    table, column, kind_type = LOCAL_ROWS[kind]
    still = await conn.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} = $1::text::{kind_type})", found)
    return found if still else None


async def local_int(conn: Conn, source_id: int, kind: str, external_id: object) -> int | None:
    found = await local_id(conn, source_id, kind, external_id)
    return None if found is None else int(found)


async def remember(conn: Conn, source_id: int, kind: str, external_id: object,
                   local: object) -> None:
    """Map the source's object to the local one (again, when the earlier one is gone)."""
    await conn.execute(
        "INSERT INTO import_objects (source_id, kind, external_id, local_id)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (source_id, kind, external_id)"
        " DO UPDATE SET local_id = EXCLUDED.local_id, done = false, source_state = NULL,"
        "  imported_at = now()", source_id, kind, str(external_id), str(local))


async def mapped_container(conn: Conn, source_id: int, kind: str, external_id: int,
                           where: str) -> int:
    """The local workspace or project of a source's one: its 1 ("Uncategorized") is ours;
    another must have been imported (else a 400 naming `where`)."""
    if external_id == 1:
        return 1
    found = await local_int(conn, source_id, kind, external_id)
    if found is None:
        raise Invalid(f"the source's {kind} {external_id} was not imported",
                      [f"{where}: {kind} {external_id} of the source was not imported: import "
                       f"its {kind}s first"])
    return found


async def user_exists(conn: Conn, username: str | None) -> bool:
    return bool(username) and bool(await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM users WHERE username = $1)", username))


async def owner_or_admin(conn: Conn, username: str | None, what: str,
                         warnings: list[str]) -> str:
    """The owner of an imported workspace, project, model or version: the source's user when
    here, else the admin (with a warning naming who it was)."""
    if await user_exists(conn, username):
        assert username is not None
        return username
    if username:
        warnings.append(f"{what}'s owner {username!r} is not a user here: owned by admin")
    return "admin"


async def list_objects(conn: Conn, source_id: int, kind: str, offset: int,
                       limit: int) -> tuple[list[asyncpg.Record], int]:
    """What the target holds from the source of one kind, by external id as a number (ids that
    are not numbers, uuids and names, after them by text)."""
    await require_source(conn, source_id)
    rows = await conn.fetch(
        "SELECT external_id, local_id, done, source_state FROM import_objects"
        " WHERE source_id = $1 AND kind = $2"
        " ORDER BY CASE WHEN external_id ~ '^[0-9]{1,30}$' THEN external_id::numeric END"
        "  NULLS LAST, external_id OFFSET $3 LIMIT $4", source_id, kind, offset, limit)
    total: int = await conn.fetchval(
        "SELECT count(*) FROM import_objects WHERE source_id = $1 AND kind = $2",
        source_id, kind)
    return list(rows), total


DONE_KINDS = ("trial", "experiment", "trial-logs")


async def mark_done(pool: asyncpg.Pool, source_id: int, kind: str, external_ids: list[str],
                    source_states: list[str]) -> int:
    """Mark imported objects done in the source state they were in; how many were marked (one
    not imported is not marked). An experiment marked done gets its best trial recorded, as
    finish_experiment records it when an experiment ends here."""
    if kind not in DONE_KINDS:
        raise Invalid("unknown kind to mark done",
                      [f"kind: {kind[:50]!r} is none of {', '.join(DONE_KINDS)}"])
    if source_states and len(source_states) != len(external_ids):
        raise Invalid("sourceStates does not match externalIds", [
            f"sourceStates: {len(source_states)} states for {len(external_ids)} ids"])
    states: list[str | None] = list(source_states) if source_states else [None] * len(
        external_ids)
    async with pool.acquire() as conn, conn.transaction():
        await require_source(conn, source_id)
        marked = await conn.fetch(
            "UPDATE import_objects o SET done = true, source_state = s.state"
            " FROM unnest($3::text[], $4::text[]) AS s(external_id, state)"
            " WHERE o.source_id = $1 AND o.kind = $2 AND o.external_id = s.external_id"
            " RETURNING o.local_id", source_id, kind, external_ids, states)
        if kind == "experiment" and marked:
            await conn.execute(
                "UPDATE experiments SET best_trial_id = best_trial(id) WHERE id = ANY($1::int[])",
                [int(r["local_id"]) for r in marked])
    return len(marked)

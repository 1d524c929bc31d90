"""The model registry as other concepts meet it: an experiment with checkpoints registered as
model versions keeps them (its deletion is refused, as in Determined); and its aliases (MLflow's),
names unique within a model that point at one of its versions ("production", "champion"), so a
deployment reads `production` and a user moves it to a new version in one step."""

from __future__ import annotations

import re
from datetime import datetime
from typing import NamedTuple

import asyncpg

from services.errors import Conflict, Invalid, NotFound

ALIAS_MAX = 64
ALIASES_PER_MODEL_MAX = 100
_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
# MLflow's rule: "latest" and "v<number>" already name versions.
_RESERVED = re.compile(r"latest|v\d+", re.IGNORECASE)


class Alias(NamedTuple):
    alias: str
    version: int
    owner: str
    updated_at: datetime


async def registered_versions(conn: asyncpg.Pool | asyncpg.Connection,
                              experiment_id: int) -> list[str]:
    """`model:version` for each version registered from the experiment's checkpoints."""
    rows = await conn.fetch(
        "SELECT m.name, v.version FROM model_versions v JOIN models m ON m.id = v.model_id"
        " JOIN checkpoints c ON c.uuid = v.checkpoint_uuid JOIN trials t ON t.id = c.trial_id"
        " WHERE t.experiment_id = $1 ORDER BY m.name, v.version", experiment_id)
    return [f"{r['name']}:{r['version']}" for r in rows]


def check_alias(alias: str) -> str:
    """An alias as MLflow allows one: a letter, then letters, digits, `_`, `.` or `-`."""
    problem = (f"at most {ALIAS_MAX} characters" if len(alias) > ALIAS_MAX else
               "a letter first, then letters, digits, '_', '.' or '-'"
               if not _ALIAS.fullmatch(alias) else
               "'latest' and 'v<number>' are reserved (they name versions)"
               if _RESERVED.fullmatch(alias) else None)
    if problem:
        raise Invalid("bad alias", [f"alias: {problem}, got {alias[:80]!r}"])
    return alias


async def aliases(conn: asyncpg.Pool | asyncpg.Connection, model_id: int) -> list[Alias]:
    """The model's aliases by name, with the version each points at."""
    rows = await conn.fetch(
        "SELECT a.alias, v.version, a.owner, a.updated_at FROM model_version_aliases a"
        " JOIN model_versions v ON v.id = a.version_id WHERE a.model_id = $1 ORDER BY a.alias",
        model_id)
    return [Alias(r["alias"], r["version"], r["owner"], r["updated_at"]) for r in rows]


async def set_alias(pool: asyncpg.Pool, model_id: int, alias: str, version: int,
                    owner: str) -> None:
    """Point `alias` at `version` of the model, moving it from the version it pointed at."""
    check_alias(alias)
    async with pool.acquire() as conn, conn.transaction():
        # The model's row, locked: two requests adding aliases cannot pass the bound together.
        await conn.execute("SELECT 1 FROM models WHERE id = $1 FOR UPDATE", model_id)
        version_id = await conn.fetchval(
            "SELECT id FROM model_versions WHERE model_id = $1 AND version = $2",
            model_id, version)
        if version_id is None:
            raise NotFound(f"version {version} of the model not found",
                           [f"version: the model has no version {version}"])
        known = await conn.fetchval(
            "SELECT count(*) FROM model_version_aliases WHERE model_id = $1 AND alias <> $2",
            model_id, alias)
        if known >= ALIASES_PER_MODEL_MAX:
            raise Conflict(f"the model has {known} aliases, the most it may have",
                           [f"alias: delete one first (at most {ALIASES_PER_MODEL_MAX})"])
        await conn.execute(
            "INSERT INTO model_version_aliases (model_id, alias, version_id, owner)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (model_id, alias) DO UPDATE"
            " SET version_id = $3, owner = $4, updated_at = now()",
            model_id, alias, version_id, owner)


async def delete_alias(pool: asyncpg.Pool, model_id: int, alias: str) -> None:
    done = await pool.execute(
        "DELETE FROM model_version_aliases WHERE model_id = $1 AND alias = $2", model_id, alias)
    if done == "DELETE 0":
        raise NotFound(f"alias {alias!r} not found", [f"alias: the model has no alias {alias!r}"])


async def alias_version(conn: asyncpg.Pool | asyncpg.Connection, model_id: int,
                        alias: str) -> int:
    """The version number `alias` points at."""
    found = await conn.fetchval(
        "SELECT v.version FROM model_version_aliases a JOIN model_versions v"
        " ON v.id = a.version_id WHERE a.model_id = $1 AND a.alias = $2", model_id, alias)
    if found is None:
        raise NotFound(f"alias {alias!r} not found", [f"alias: the model has no alias {alias!r}"])
    return int(found)

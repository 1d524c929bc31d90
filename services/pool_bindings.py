"""Resource pools bound to workspaces, as Determined binds them (`det resource-pool bindings`),
and where a submission goes: the pool its config names, else its workspace's default (compute
pool, or aux pool for work of 0 slots), else the cluster's default.

A pool with bindings is usable only by the workspaces bound to it; a pool with none, by every
workspace. The cluster's default pool (`default`) serves every workspace and cannot be bound. A
pool exists when the master starts it (EPOCHAL_RESOURCE_POOLS) or an agent registered in it:
the pools GET /resource-pools lists (`pools.pool_names`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

import asyncpg

from common.temporal_names import DEFAULT_RESOURCE_POOL
from services import pools
from services.errors import Invalid, NotFound

Conn: TypeAlias = asyncpg.Pool | asyncpg.Connection

__all__ = ["Change", "available_pools", "bound_workspaces", "change_bindings",
           "check_default_pool", "check_pool_usable", "resolve_pool", "workspace_of_project"]


class Change(Enum):
    """What a binding request does: Determined's Bind, Unbind and Overwrite."""

    ADD = "add"
    REMOVE = "remove"
    REPLACE = "replace"


@dataclass(frozen=True)
class Workspace:
    id: int
    name: str


async def _existing_pool(pool: asyncpg.Pool, configured: tuple[str, ...],
                         pool_name: str) -> None:
    if pool_name not in await pools.pool_names(pool, configured):
        raise NotFound(f"resource pool {pool_name!r} not found", [
            f"resourcePoolName: no resource pool is named {pool_name!r} (the master's pools"
            " and those agents registered in)"])


async def _workspaces(conn: Conn, ids: Sequence[int], names: Sequence[str]) -> list[Workspace]:
    """The workspaces a request names by id and by name, each once; an unknown one is the
    request's mistake, named by its field."""
    found_ids = {r["id"]: r["name"] for r in await conn.fetch(
        "SELECT id, name FROM workspaces WHERE id = ANY($1::int[])", list(ids))}
    found_names = {r["name"]: r["id"] for r in await conn.fetch(
        "SELECT id, name FROM workspaces WHERE name = ANY($1::text[])", list(names))}
    problems = [f"workspaceIds: no workspace has id {i}" for i in ids if i not in found_ids]
    problems += [f"workspaceNames: no workspace is named {n!r}" for n in names
                 if n not in found_names]
    if problems:
        raise Invalid("unknown workspaces", problems)
    every = {**found_ids, **{i: n for n, i in found_names.items()}}
    return [Workspace(i, n) for i, n in sorted(every.items())]


async def change_bindings(pool: asyncpg.Pool, configured: tuple[str, ...], pool_name: str,
                          change: Change, ids: Sequence[int], names: Sequence[str]) -> None:
    """Bind the pool to the named workspaces, unbind it from them, or make them its only
    bindings (none: the pool is every workspace's again). The caller checked it is an admin."""
    if change is not Change.REMOVE and pool_name == DEFAULT_RESOURCE_POOL:
        raise Invalid(f"the default resource pool {pool_name!r} cannot be bound to any"
                      " workspace", [f"resourcePoolName: {pool_name!r} is the cluster's default"
                                     " pool, which every workspace uses"])
    await _existing_pool(pool, configured, pool_name)
    workspaces = await _workspaces(pool, ids, names)
    if not workspaces and change is not Change.REPLACE:
        raise Invalid("no workspace named", ["workspaceNames: name at least one workspace"
                                             " (or give workspaceIds)"])
    chosen = [w.id for w in workspaces]
    async with pool.acquire() as conn, conn.transaction():
        if change is Change.REMOVE:
            bound = {r["workspace_id"] for r in await conn.fetch(
                "SELECT workspace_id FROM pool_workspace_bindings WHERE pool_name = $1",
                pool_name)}
            unbound = [w for w in workspaces if w.id not in bound]
            if unbound:
                raise Invalid("no such binding", [
                    f"workspaceNames: workspace {w.name!r} is not bound to resource pool"
                    f" {pool_name!r}" for w in unbound])
            await conn.execute(
                "DELETE FROM pool_workspace_bindings WHERE pool_name = $1"
                " AND workspace_id = ANY($2::int[])", pool_name, chosen)
            return
        if change is Change.REPLACE:
            await conn.execute("DELETE FROM pool_workspace_bindings WHERE pool_name = $1",
                               pool_name)
        await conn.execute(
            "INSERT INTO pool_workspace_bindings (pool_name, workspace_id)"
            " SELECT $1, unnest($2::int[]) ON CONFLICT DO NOTHING", pool_name, chosen)


async def bound_workspaces(pool: asyncpg.Pool, configured: tuple[str, ...],
                           pool_name: str) -> list[int]:
    """The ids of the workspaces bound to the pool (none: every workspace may use it)."""
    await _existing_pool(pool, configured, pool_name)
    rows = await pool.fetch(
        "SELECT workspace_id FROM pool_workspace_bindings WHERE pool_name = $1"
        " ORDER BY workspace_id", pool_name)
    return [int(r["workspace_id"]) for r in rows]


async def available_pools(pool: asyncpg.Pool, configured: tuple[str, ...],
                          workspace_id: int) -> list[str]:
    """The pools the workspace may use: those bound to it and those bound to none, sorted."""
    names = await pools.pool_names(pool, configured)
    bindings = await pool.fetch(
        "SELECT pool_name, workspace_id FROM pool_workspace_bindings"
        " WHERE pool_name = ANY($1::text[])", names)
    bound: dict[str, set[int]] = {}
    for row in bindings:
        bound.setdefault(row["pool_name"], set()).add(row["workspace_id"])
    return [n for n in names if n not in bound or workspace_id in bound[n]]


async def workspace_of_project(conn: Conn, project_id: int) -> int:
    found = await conn.fetchval("SELECT workspace_id FROM projects WHERE id = $1", project_id)
    if found is None:
        raise Invalid(f"project {project_id} not found",
                      [f"projectId: no project has id {project_id}"])
    return int(found)


async def check_pool_usable(conn: Conn, workspace_id: int, pool_name: str,
                            field: str = "resources.resource_pool") -> None:
    """Refuse a pool bound to other workspaces only (Invalid naming `field`, the pool and the
    workspace)."""
    row = await conn.fetchrow(
        "SELECT (SELECT name FROM workspaces WHERE id = $2) AS workspace,"
        " array_agg(w.name ORDER BY w.name) FILTER (WHERE w.id IS NOT NULL) AS bound,"
        " bool_or(b.workspace_id = $2) AS mine"
        " FROM pool_workspace_bindings b LEFT JOIN workspaces w ON w.id = b.workspace_id"
        " WHERE b.pool_name = $1", pool_name, workspace_id)
    if row is None or not row["bound"] or row["mine"]:
        return
    raise Invalid(
        f"resource pool {pool_name!r} is not available to workspace {row['workspace']!r}", [
            f"{field}: resource pool {pool_name!r} is bound to workspaces"
            f" {', '.join(repr(n) for n in row['bound'])} only, not to workspace"
            f" {row['workspace']!r} (id {workspace_id}); use a pool available to it"
            " (`det workspace list-pools`) or ask an admin to bind this one"])


async def resolve_pool(conn: Conn, workspace_id: int, named: str | None, slots: int,
                       field: str = "resources.resource_pool") -> str:
    """The pool a submission in the workspace goes to: the one its config names, else the
    workspace's default compute pool (aux pool for 0 slots), else the cluster's default; a
    pool bound to other workspaces only is refused."""
    if not named:
        row = await conn.fetchrow(
            "SELECT default_compute_pool, default_aux_pool FROM workspaces WHERE id = $1",
            workspace_id)
        default = None if row is None else row[
            "default_aux_pool" if slots == 0 else "default_compute_pool"]
        named = default or DEFAULT_RESOURCE_POOL
    await check_pool_usable(conn, workspace_id, named, field)
    return named


async def check_default_pool(pool: asyncpg.Pool, configured: tuple[str, ...],
                             workspace_id: int | None, pool_name: str, field: str) -> None:
    """A workspace's default pool must exist and (for a workspace that exists) be available
    to it; "" clears it. `field` names it in the error."""
    if not pool_name:
        return
    if pool_name not in await pools.pool_names(pool, configured):
        raise Invalid(f"resource pool {pool_name!r} not found", [
            f"{field}: no resource pool is named {pool_name!r}"])
    if workspace_id is not None:
        await check_pool_usable(pool, workspace_id, pool_name, field)

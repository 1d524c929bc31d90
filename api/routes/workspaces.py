"""Workspaces and projects: Determined's folders for experiments (`det workspace|project ...`).

Workspace 1 and project 1 ("Uncategorized") always exist (migration 0007); experiments go there
unless the create request or the config names another project. Of Determined's per-workspace
settings Epochal keeps the default pools (`defaultComputePool`, `defaultAuxPool`: where a
submission that names no pool goes, services/pool_bindings.py) and adds its own slot cap
(`maxSlots`, admins only, which the scheduler reads); the agent user and checkpoint storage
answer empty.
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from api import auth, views
from api.deps import AppSettings, Pool
from api.errors import INT32, ApiError, not_found
from api.queries import workspaces as queries
from api.schemas import Empty, answers
from api.schemas.workspaces import (
    Deleted,
    ProjectAnswer,
    ProjectList,
    WorkspaceAnswer,
    WorkspaceCreated,
    WorkspaceList,
    WorkspaceMembers,
    WorkspacePools,
)
from services import pool_bindings

router = APIRouter(prefix="/api/v1", tags=["workspaces"])

NAME_MAX = 80
KEY_PATTERN = re.compile(r"^[A-Za-z0-9]{1,5}$")


def workspace_json(row: asyncpg.Record) -> dict[str, Any]:
    """Determined's v1Workspace."""
    return {
        "id": row["id"], "name": row["name"], "archived": row["archived"],
        "username": row["owner"], "userId": row["user_id"], "immutable": row["immutable"],
        "numProjects": row["num_projects"], "numExperiments": row["num_experiments"],
        "pinned": False, "state": "WORKSPACE_STATE_UNSPECIFIED", "errorMessage": "",
        "agentUserGroup": None, "checkpointStorageConfig": None,
        "defaultComputePool": row["default_compute_pool"] or "",
        "defaultAuxPool": row["default_aux_pool"] or "",
        "maxSlots": row["max_slots"],  # Epochal's: the most slots its work holds at once
    }


def project_json(row: asyncpg.Record) -> dict[str, Any]:
    """Determined's v1Project."""
    return {
        "id": row["id"], "name": row["name"], "key": row["key"],
        "description": row["description"], "workspaceId": row["workspace_id"],
        "workspaceName": row["workspace_name"], "archived": row["archived"],
        "immutable": row["immutable"], "username": row["owner"], "userId": row["user_id"],
        "notes": row["notes"], "numExperiments": row["num_experiments"],
        "numActiveExperiments": row["num_active"], "numRuns": 0,
        "lastExperimentStartedAt": views.rfc3339(row["last_started"]),
        "state": "WORKSPACE_STATE_UNSPECIFIED", "errorMessage": "",
    }


async def fetch_workspace(conn: asyncpg.Pool | asyncpg.Connection, workspace_id: int) -> Any:
    row = await queries.fetch_workspace(conn, workspace_id)
    if row is None:
        raise not_found("workspace", workspace_id)
    return row


async def fetch_project(conn: asyncpg.Pool | asyncpg.Connection, project_id: int) -> Any:
    row = await queries.fetch_project(conn, project_id)
    if row is None:
        raise not_found("project", project_id)
    return row


def _page(items: list[Any], offset: int, limit: int) -> tuple[list[Any], dict[str, Any]]:
    page = items[offset:offset + limit] if limit else items[offset:]
    return page, views.pagination(offset, limit or len(items), len(page), len(items))


def _check_name(kind: str, name: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_MAX or "\x00" in name:
        raise ApiError(400, f"bad {kind} name",
                       [f"name: 1 to {NAME_MAX} characters, got {name!r}"])
    return name


# -- workspaces ------------------------------------------------------------------------------

@router.get("/workspaces", **answers(WorkspaceList))
async def list_workspaces(
    pool: Pool,
    name: str | None = None,
    nameCaseSensitive: str | None = None,  # noqa: N803 (Determined's name)
    archived: bool | None = None,
    sortBy: str = "SORT_BY_ID",  # noqa: N803
    orderBy: str = "ORDER_BY_ASC",  # noqa: N803
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetWorkspaces: `name` matches regardless of case, `nameCaseSensitive`
    exactly (`det workspace describe NAME` looks a workspace up this way)."""
    rows = await queries.fetch_workspaces(
        pool, name or None, nameCaseSensitive or None, archived,
        by_name=sortBy == "SORT_BY_NAME", descending=orderBy == "ORDER_BY_DESC")
    page, pagination = _page([workspace_json(r) for r in rows], offset, limit)
    return {"workspaces": page, "pagination": pagination}


@router.get("/workspaces/{workspace_id}", **answers(WorkspaceAnswer))
async def get_workspace(workspace_id: int, pool: Pool) -> dict[str, Any]:
    return {"workspace": workspace_json(await fetch_workspace(pool, workspace_id))}


POOL_NAME_MAX = 255


class WorkspaceCreate(BaseModel):
    name: str = Field(max_length=NAME_MAX * 4)
    defaultComputePool: str | None = Field(None, max_length=POOL_NAME_MAX)
    defaultAuxPool: str | None = Field(None, max_length=POOL_NAME_MAX)


@router.post("/workspaces", **answers(WorkspaceCreated))
async def create_workspace(body: WorkspaceCreate, request: Request, pool: Pool,
                           settings: AppSettings) -> dict[str, Any]:
    """Determined's PostWorkspace, with its default pools (which must exist; as on Determined,
    binding them to the new workspace is another call); its other settings (agent user,
    checkpoint storage, namespaces) are not kept."""
    owner = auth.current(request).username
    name = _check_name("workspace", body.name)
    for field, value in (("defaultComputePool", body.defaultComputePool),
                         ("defaultAuxPool", body.defaultAuxPool)):
        await pool_bindings.check_default_pool(pool, settings.resource_pools, None, value or "",
                                               field)
    workspace_id = await queries.insert_workspace(
        pool, name, owner, body.defaultComputePool or None, body.defaultAuxPool or None)
    if workspace_id is None:
        raise ApiError(409, f"workspace {name!r} already exists")
    return {"workspace": workspace_json(await fetch_workspace(pool, workspace_id)),
            "namespaceBindings": {}}


# Determined's pre-canned role its master gives a workspace's creator
# (security.authz.workspace_creator_assign_role, on by default; role 2).
WORKSPACE_ADMIN_ROLE = {"roleId": 2, "name": "WorkspaceAdmin"}


@router.get("/roles/workspace/{workspace_id}", **answers(WorkspaceMembers))
async def list_workspace_members(
    workspace_id: int, pool: Pool, name: str | None = Query(None, max_length=128),
) -> dict[str, Any]:
    """Determined's GetGroupsAndUsersAssignedToWorkspace (`det workspace list-members`) on a
    cluster without RBAC: Epochal has no roles nor groups, so the one member is the workspace's
    creator, as the WorkspaceAdmin Determined assigns them. `name` filters by (display) name."""
    await fetch_workspace(pool, workspace_id)  # 404 if there is none
    creator = await queries.fetch_workspace_creator(pool, workspace_id)
    if creator is not None and name and not any(
            name in (text or "") for text in (creator["display_name"], creator["username"])):
        creator = None
    if creator is None:
        return {"assignments": [], "groups": [], "usersAssignedDirectly": []}
    assignment = {"userId": creator["id"], "roleAssignment": {
        "role": WORKSPACE_ADMIN_ROLE, "scopeWorkspaceId": workspace_id, "scopeCluster": False}}
    return {"assignments": [{"role": WORKSPACE_ADMIN_ROLE, "groupRoleAssignments": [],
                             "userRoleAssignments": [assignment]}],
            "groups": [], "usersAssignedDirectly": [views.user_json(creator)]}


# -- projects --------------------------------------------------------------------------------

@router.get("/workspaces/{workspace_id}/projects", **answers(ProjectList))
async def list_workspace_projects(
    workspace_id: int,
    pool: Pool,
    name: str | None = None,
    archived: bool | None = None,
    sortBy: str = "SORT_BY_ID",  # noqa: N803 (Determined's name)
    orderBy: str = "ORDER_BY_ASC",  # noqa: N803
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetWorkspaceProjects; workspace 0 means every workspace."""
    if workspace_id:
        await fetch_workspace(pool, workspace_id)
    rows = await queries.fetch_projects(
        pool, workspace_id, name or None, archived,
        by_name=sortBy == "SORT_BY_NAME", descending=orderBy == "ORDER_BY_DESC")
    page, pagination = _page([project_json(r) for r in rows], offset, limit)
    return {"projects": page, "pagination": pagination}


class ProjectCreate(BaseModel):
    name: str = Field(max_length=NAME_MAX * 4)
    description: str | None = Field(None, max_length=10_000)
    workspaceId: int | None = None
    key: str | None = None


async def _free_key(conn: asyncpg.Connection, name: str) -> str:
    """Determined's project key when none is given: letters of the name, made unique."""
    stem = (re.sub(r"[^A-Za-z0-9]", "", name).upper() or "PRJ")[:3]
    taken = await queries.fetch_project_keys(conn, stem)
    for n in range(10_000):
        key = stem if n == 0 else f"{stem}{n}"[:5]
        if key not in taken:
            return key
    raise ApiError(409, f"no free project key starting with {stem!r}: give one with --key")


@router.post("/workspaces/{workspace_id}/projects", **answers(ProjectAnswer))
async def create_project(
    workspace_id: int, body: ProjectCreate, request: Request, pool: Pool
) -> dict[str, Any]:
    owner = auth.current(request).username
    name = _check_name("project", body.name)
    if body.workspaceId not in (None, 0, workspace_id):
        raise ApiError(400, "workspaceId does not match", [
            f"workspaceId: is {body.workspaceId}, but the path names workspace {workspace_id}"])
    if body.key is not None and not KEY_PATTERN.match(body.key):
        raise ApiError(400, "bad project key",
                       [f"key: 1 to 5 letters or digits, got {body.key!r}"])
    async with pool.acquire() as conn, conn.transaction():
        workspace = await fetch_workspace(conn, workspace_id)
        if workspace["archived"]:
            raise ApiError(409, f"workspace {workspace['name']!r} is archived")
        if await queries.project_name_taken(conn, workspace_id, name):
            raise ApiError(409, f"project {name!r} already exists in workspace"
                           f" {workspace['name']!r}")
        key = body.key.upper() if body.key else await _free_key(conn, name)
        if await queries.project_key_taken(conn, key):
            raise ApiError(409, f"project key {key!r} is taken")
        project_id = await queries.insert_project(
            conn, workspace_id, name, key, body.description or "", owner)
    return {"project": project_json(await fetch_project(pool, project_id))}


@router.get("/projects/{project_id}", **answers(ProjectAnswer))
async def get_project(project_id: int, pool: Pool) -> dict[str, Any]:
    return {"project": project_json(await fetch_project(pool, project_id))}


# -- edit, archive, delete -------------------------------------------------------------------

def _mutable(kind: str, row: asyncpg.Record) -> None:
    if row["immutable"]:
        raise ApiError(409, f"the {row['name']} {kind} is Determined's default: it cannot be"
                       " changed, archived or deleted")


class WorkspacePatch(BaseModel):
    """Determined's v1PatchWorkspace: `det workspace edit` sends the default pools as
    `defaultComputeResourcePool`/`defaultAuxResourcePool` (null: unchanged, "": none), older
    clients as `defaultComputePool`/`defaultAuxPool`; `maxSlots` is Epochal's (null: no cap)."""

    name: str | None = Field(None, max_length=NAME_MAX * 4)
    defaultComputeResourcePool: str | None = Field(None, max_length=POOL_NAME_MAX)
    defaultAuxResourcePool: str | None = Field(None, max_length=POOL_NAME_MAX)
    defaultComputePool: str | None = Field(None, max_length=POOL_NAME_MAX)
    defaultAuxPool: str | None = Field(None, max_length=POOL_NAME_MAX)
    maxSlots: int | None = Field(None, ge=0, le=INT32.stop - 1)


@router.patch("/workspaces/{workspace_id}", **answers(WorkspaceAnswer))
async def patch_workspace(
    workspace_id: int, body: WorkspacePatch, request: Request, pool: Pool,
    settings: AppSettings,
) -> dict[str, Any]:
    """`det workspace edit`: its name and default pools (its owner or an admin; a default pool
    must exist and be available to the workspace), and Epochal's slot cap (admins only)."""
    principal = auth.current(request)
    workspace = await fetch_workspace(pool, workspace_id)
    compute = (body.defaultComputeResourcePool if body.defaultComputeResourcePool is not None
               else body.defaultComputePool)
    aux = body.defaultAuxResourcePool if body.defaultAuxResourcePool is not None else (
        body.defaultAuxPool)
    cap_given = "maxSlots" in body.model_fields_set
    if body.name is not None or compute is not None or aux is not None:
        _mutable("workspace", workspace)
    if cap_given:
        auth.require_admin(principal, "set a workspace's maxSlots")
    for field, value in (("defaultComputeResourcePool", compute),
                         ("defaultAuxResourcePool", aux)):
        if value is not None:
            await pool_bindings.check_default_pool(pool, settings.resource_pools, workspace_id,
                                                   value, field)
    name = _check_name("workspace", body.name) if body.name is not None else None
    try:
        await queries.update_workspace(pool, workspace_id, name=name, compute_pool=compute,
                                       aux_pool=aux, max_slots=body.maxSlots,
                                       set_max_slots=cap_given)
    except asyncpg.UniqueViolationError as err:
        raise ApiError(409, f"workspace {name!r} already exists") from err
    return {"workspace": workspace_json(await fetch_workspace(pool, workspace_id))}


@router.get("/workspaces/{workspace_id}/available-resource-pools", **answers(WorkspacePools))
async def list_workspace_pools(
    workspace_id: int, pool: Pool, settings: AppSettings,
    limit: int = Query(0, ge=0), offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's ListRPsBoundToWorkspace (`det workspace list-pools`): the pools bound to
    the workspace and those bound to none."""
    await fetch_workspace(pool, workspace_id)  # 404 if there is none
    names = await pool_bindings.available_pools(pool, settings.resource_pools, workspace_id)
    page, pagination = _page(names, offset, limit)
    return {"resourcePools": page, "pagination": pagination}


class ProjectPatch(BaseModel):
    name: str | None = Field(None, max_length=NAME_MAX * 4)
    description: str | None = Field(None, max_length=10_000)
    key: str | None = None


@router.patch("/projects/{project_id}", **answers(ProjectAnswer))
async def patch_project(
    project_id: int, body: ProjectPatch, request: Request, pool: Pool
) -> dict[str, Any]:
    """`det project edit`: name, description, key."""
    row = await fetch_project(pool, project_id)
    _mutable("project", row)
    name = _check_name("project", body.name) if body.name is not None else None
    if body.key is not None and not KEY_PATTERN.match(body.key):
        raise ApiError(400, "bad project key",
                       [f"key: 1 to 5 letters or digits, got {body.key!r}"])
    try:
        await queries.update_project(pool, project_id, name, body.description,
                                     body.key.upper() if body.key else None)
    except asyncpg.UniqueViolationError as err:
        raise ApiError(409, "the project's name or key is taken",
                       [f"name: {name!r}" if name else f"key: {body.key!r}"]) from err
    return {"project": project_json(await fetch_project(pool, project_id))}


def _archive_route(kind: str, table: queries.Table, archived: bool) -> None:
    verb = "archive" if archived else "unarchive"

    async def archive(item_id: int, request: Request, pool: Pool) -> dict[str, Any]:
        fetch_item = fetch_workspace if kind == "workspace" else fetch_project
        _mutable(kind, await fetch_item(pool, item_id))
        await queries.set_archived(pool, table, item_id, archived)
        return {}

    archive.__name__ = f"{verb}_{kind}"
    router.post(f"/{table}/{{item_id}}/{verb}", summary=f"{verb.capitalize()} a {kind}",
                **answers(Empty))(archive)


_TABLES: tuple[tuple[str, queries.Table], ...] = (("workspace", "workspaces"),
                                                  ("project", "projects"))
for _kind, _table in _TABLES:
    for _archived in (True, False):
        _archive_route(_kind, _table, _archived)


async def _delete(pool: Pool, kind: str, table: queries.Table, row: Any) -> dict[str, Any]:
    """Experiments and models are never deleted along: a workspace or project that holds any is
    refused (move or delete them first)."""
    _mutable(kind, row)
    if row["num_experiments"]:
        raise ApiError(409, f"{kind} {row['name']!r} holds {row['num_experiments']}"
                       " experiments: move or delete them first")
    if kind == "workspace":
        holds = await queries.count_models_in_workspace(pool, row["id"])
        if holds:
            raise ApiError(409, f"workspace {row['name']!r} holds {holds} models in the model"
                                " registry: move or delete them first")
    await queries.delete_row(pool, table, row["id"])
    return {"completed": True}


@router.delete("/workspaces/{workspace_id}", **answers(Deleted))
async def delete_workspace(workspace_id: int, request: Request, pool: Pool) -> dict[str, Any]:
    """Delete a workspace with its projects and templates."""
    return await _delete(pool, "workspace", "workspaces", await fetch_workspace(pool, workspace_id))


@router.delete("/projects/{project_id}", **answers(Deleted))
async def delete_project(project_id: int, request: Request, pool: Pool) -> dict[str, Any]:
    return await _delete(pool, "project", "projects", await fetch_project(pool, project_id))

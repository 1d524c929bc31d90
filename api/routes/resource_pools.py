"""Resource pools bound to workspaces (`det resource-pool bindings add|remove|replace|
list-workspaces`): Determined's BindRPToWorkspace, UnbindRPFromWorkspace,
OverwriteRPWorkspaceBindings and ListWorkspacesBoundToRP. Only admins change bindings
(api/access.py); the rules are services/pool_bindings.py's.

GET /resource-pools itself is api/routes/jobs.py's; Determined's v1ResourcePool has no field
for bindings, so it shows none.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from api import views
from api.deps import AppSettings, Pool
from api.errors import INT32, ApiError
from api.schemas import Empty, answers
from api.schemas.resource_pools import PoolBindings
from services import pool_bindings
from services.pool_bindings import Change

router = APIRouter(prefix="/api/v1", tags=["resource-pools"])

MAX_WORKSPACES = 1000
PoolName = Annotated[str, Path(min_length=1, max_length=255)]


class BindingsRequest(BaseModel):
    """Determined's v1BindRPToWorkspaceRequest, v1UnbindRPFromWorkspaceRequest and
    v1OverwriteRPWorkspaceBindingsRequest: workspaces by id, by name, or both."""

    resourcePoolName: str | None = None
    workspaceIds: list[Annotated[int, Field(ge=1, le=INT32.stop - 1)]] | None = Field(
        default=None, max_length=MAX_WORKSPACES)
    workspaceNames: list[Annotated[str, Field(max_length=320)]] | None = Field(
        default=None, max_length=MAX_WORKSPACES)


async def _change(pool_name: str, body: BindingsRequest | None, change: Change, pool: Pool,
                  settings: AppSettings) -> dict[str, Any]:
    body = body or BindingsRequest()
    if body.resourcePoolName not in (None, "", pool_name):
        raise ApiError(400, "resourcePoolName does not match the path", [
            f"resourcePoolName: is {body.resourcePoolName!r}, but the path names"
            f" {pool_name!r}"])
    await pool_bindings.change_bindings(pool, settings.resource_pools, pool_name, change,
                                        body.workspaceIds or [], body.workspaceNames or [])
    return {}


@router.post("/resource-pools/{pool_name}/workspace-bindings", **answers(Empty))
async def bind_workspaces(pool_name: PoolName, pool: Pool, settings: AppSettings,
                          body: BindingsRequest | None = None) -> dict[str, Any]:
    """Bind the pool to more workspaces (`det rp bindings add POOL WORKSPACE...`): from now on
    only its bound workspaces' experiments and tasks may use it."""
    return await _change(pool_name, body, Change.ADD, pool, settings)


@router.delete("/resource-pools/{pool_name}/workspace-bindings", **answers(Empty))
async def unbind_workspaces(pool_name: PoolName, pool: Pool, settings: AppSettings,
                            body: BindingsRequest | None = None) -> dict[str, Any]:
    """Unbind the pool from workspaces (`det rp bindings remove`); a pool left with none is
    every workspace's again."""
    return await _change(pool_name, body, Change.REMOVE, pool, settings)


@router.put("/resource-pools/{pool_name}/workspace-bindings", **answers(Empty))
async def replace_bindings(pool_name: PoolName, pool: Pool, settings: AppSettings,
                           body: BindingsRequest | None = None) -> dict[str, Any]:
    """Make the named workspaces the pool's only ones (`det rp bindings replace`)."""
    return await _change(pool_name, body, Change.REPLACE, pool, settings)


@router.get("/resource-pools/{pool_name}/workspace-bindings", **answers(PoolBindings))
async def list_bound_workspaces(
    pool_name: PoolName, pool: Pool, settings: AppSettings,
    limit: int = Query(0, ge=0), offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """The ids of the workspaces bound to the pool (`det rp bindings list-workspaces`)."""
    ids = await pool_bindings.bound_workspaces(pool, settings.resource_pools, pool_name)
    page = ids[offset:offset + limit] if limit else ids[offset:]
    return {"workspaceIds": page,
            "pagination": views.pagination(offset, limit or len(ids), len(page), len(ids))}

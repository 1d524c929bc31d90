"""Config templates (`det template ...`, `--template NAME` on experiment create).

Every user reads every template; only its owner (who made it) and admins change or remove it
(api/access.py), since its config becomes part of the experiments that name it.

A template is a partial experiment config kept under a name. Creating an experiment with one
merges the template UNDER the config (services/templates.py): what the config says wins, and the
template fills in what it leaves out, as Determined does.
"""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
import yaml
from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel

from api import auth, views
from api.deps import Pool
from api.errors import ApiError
from api.queries import templates as queries
from api.queries.workspaces import workspace_exists
from api.schemas import Empty, answers
from api.schemas.templates import TemplateAnswer, TemplateList
from common.expconf import MAX_CONFIG_DEPTH, ConfigError, load_config_yaml
from common.expconf.redaction import redacted
from services.workspaces import DEFAULT_PROJECT_ID

router = APIRouter(prefix="/api/v1", tags=["templates"])

NAME_MAX = 255


def template_json(row: asyncpg.Record) -> dict[str, Any]:
    """Determined's v1Template."""
    return {"name": row["name"], "config": redacted(row["config"]),
            "workspaceId": row["workspace_id"]}


async def _fetch_template(pool: asyncpg.Pool, name: str) -> asyncpg.Record:
    row = await queries.fetch_template(pool, name)
    if row is None:
        raise ApiError(404, f"template '{name}' not found")
    return row


def _check(name: str, config: Any) -> dict[str, Any]:
    if not name or len(name) > NAME_MAX or "\x00" in name:
        raise ApiError(400, "bad template name", [f"name: 1 to {NAME_MAX} characters"])
    if not isinstance(config, dict):
        raise ApiError(400, "a template is a partial experiment config",
                       [f"config: a mapping of config fields, got {type(config).__name__}"])
    # The bounds of a config's text hold for a template's, which becomes part of configs.
    try:
        load_config_yaml(yaml.safe_dump(config), "config")
    except ConfigError as err:
        raise ApiError(400, "a template is a partial experiment config", err.errors) from err
    except RecursionError:
        raise ApiError(400, "a template is a partial experiment config",
                       [f"config: nested deeper than {MAX_CONFIG_DEPTH} levels"]) from None
    return config


async def _workspace_id(pool: asyncpg.Pool, workspace_id: int | None) -> int:
    wanted = workspace_id or DEFAULT_PROJECT_ID
    if not await workspace_exists(pool, wanted):
        raise ApiError(400, f"workspace {wanted} not found",
                       [f"workspaceId: no workspace has id {wanted}"])
    return wanted


class TemplateBody(BaseModel):
    """Determined's v1Template, as `det template create|set` sends it."""

    name: str | None = None
    config: Any = None
    workspaceId: int | None = None


@router.get("/templates", **answers(TemplateList))
async def list_templates(
    pool: Pool,
    name: str | None = None,
    workspaceIds: Annotated[list[int] | None, Query()] = None,  # noqa: N803 (Determined's name)
    orderBy: str = "ORDER_BY_ASC",  # noqa: N803
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetTemplates: `name` is a case-insensitive substring."""
    rows = await queries.fetch_templates(pool, name or None, workspaceIds or None,
                                         descending=orderBy == "ORDER_BY_DESC")
    templates = [template_json(r) for r in rows]
    page = templates[offset:offset + limit] if limit else templates[offset:]
    return {"templates": page,
            "pagination": views.pagination(offset, limit or len(templates), len(page),
                                           len(templates))}


@router.get("/templates/{name}", **answers(TemplateAnswer))
async def get_template(name: str, pool: Pool) -> dict[str, Any]:
    return {"template": template_json(await _fetch_template(pool, name))}


@router.post("/templates/{name}", **answers(TemplateAnswer))
async def create_template(
    name: str, body: TemplateBody, request: Request, pool: Pool
) -> dict[str, Any]:
    config = _check(name, body.config)
    workspace_id = await _workspace_id(pool, body.workspaceId)
    row = await queries.insert_template(pool, name, config, workspace_id,
                                        str(auth.current(request).username))
    if row is None:
        raise ApiError(409, f"template {name!r} already exists")
    return {"template": template_json(row)}


@router.put("/templates/{name}", **answers(TemplateAnswer))
async def put_template(
    name: str, body: TemplateBody, request: Request, pool: Pool
) -> dict[str, Any]:
    """Create or replace (Determined's PutTemplate)."""
    config = _check(name, body.config)
    workspace_id = await _workspace_id(pool, body.workspaceId)
    row = await queries.upsert_template(pool, name, config, workspace_id,
                                        str(auth.current(request).username))
    return {"template": template_json(row)}


@router.patch("/templates/{name}", **answers(TemplateAnswer))
async def patch_template_config(
    name: str, request: Request, pool: Pool, config: Any = Body(None)  # noqa: B008
) -> dict[str, Any]:
    """Determined's PatchTemplateConfig: the body is the new config itself."""
    _check(name, config)
    row = await queries.update_template_config(pool, name, config)
    if row is None:
        raise ApiError(404, f"template '{name}' not found")
    return {"template": template_json(row)}


@router.delete("/templates/{name}", **answers(Empty))
async def delete_template(name: str, request: Request, pool: Pool) -> dict[str, Any]:
    await _fetch_template(pool, name)
    await queries.delete_template(pool, name)
    return {}



"""The model registry (`det model ...`): named models whose numbered versions are checkpoints.

Determined's routes and shapes (v1Model, v1ModelVersion). A model is named in paths by its name
or, when the path segment is all digits, by its id (names may not be all digits, as in
Determined). Registering a checkpoint keeps it: checkpoint GC skips it and its experiment cannot
be deleted while a version points at it (activities/experiment_store.py, services/models.py).
Anyone logged in reads and creates models; only a model's owner or an admin changes or deletes it
(api/access.py).

Beside Determined's routes, Epochal's aliases (MLflow's): `/models/{model}/aliases/{alias}` names
one version; setting it on another version moves it (services/models.py).
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from api import auth, views
from api.deps import Pool
from api.errors import ApiError, not_found
from api.queries import checkpoints as checkpoint_queries
from api.queries import models as queries
from api.queries.workspaces import fetch_workspace_id, workspace_exists
from api.schemas import Empty, answers
from api.schemas.models import (
    ModelAliases,
    ModelAnswer,
    ModelLabels,
    ModelList,
    ModelVersionAnswer,
    ModelVersionList,
)
from common.expconf import MAX_CONFIG_DEPTH
from common.states import CheckpointState
from services import models as registry
from services.workspaces import DEFAULT_PROJECT_ID

router = APIRouter(prefix="/api/v1", tags=["models"])

NAME_MAX = 255
TEXT_MAX = 65_536  # description, notes, comment
LABELS_MAX = 100
METADATA_MAX_BYTES = 65_536
PAGE_MAX = 1_000

# -- shapes ----------------------------------------------------------------------------------

def model_json(row: asyncpg.Record) -> dict[str, Any]:
    """Determined's v1Model."""
    return {
        "id": row["id"], "name": row["name"], "description": row["description"],
        "notes": row["notes"], "metadata": row["metadata"], "labels": list(row["labels"]),
        "creationTime": views.rfc3339(row["created_at"]),
        "lastUpdatedTime": views.rfc3339(row["updated_at"]),
        "numVersions": row["num_versions"], "username": row["owner"], "userId": row["user_id"],
        "archived": row["archived"], "workspaceId": row["workspace_id"],
        "latestVersion": row["latest_version"],  # Epochal's (Determined's clients ignore it)
    }


def version_json(row: asyncpg.Record, model: dict[str, Any],
                 checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Determined's v1ModelVersion."""
    return {
        "id": row["id"], "version": row["version"], "model": model, "checkpoint": checkpoint,
        "name": row["name"], "comment": row["comment"], "notes": row["notes"],
        "metadata": row["metadata"], "labels": list(row["labels"]),
        "creationTime": views.rfc3339(row["created_at"]),
        "lastUpdatedTime": views.rfc3339(row["updated_at"]),
        "username": row["owner"], "userId": row["user_id"],
    }


async def _versions_json(conn: asyncpg.Pool | asyncpg.Connection, model: asyncpg.Record,
                         rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
    """Each version with its model and its checkpoint (one query for all the checkpoints)."""
    found = await checkpoint_queries.fetch_checkpoints(conn, [r["checkpoint_uuid"] for r in rows])
    checkpoints = {r["uuid"]: views.checkpoint_json(r, r["searcher_metric"]) for r in found}
    shown = model_json(model)
    return [version_json(r, shown, checkpoints[str(r["checkpoint_uuid"])]) for r in rows]


# -- lookups and checks ----------------------------------------------------------------------

async def fetch_model(conn: asyncpg.Pool | asyncpg.Connection, identifier: str,
                      *, lock: bool = False) -> asyncpg.Record:
    """A model by name, or by id when `identifier` is all digits (Determined's rule)."""
    row = await queries.fetch_model(conn, identifier, lock=lock)
    if row is None:
        raise not_found("model", repr(identifier))
    return row


async def _fetch_version_row(conn: asyncpg.Pool | asyncpg.Connection, model: asyncpg.Record,
                             number: int) -> asyncpg.Record:
    row = await queries.fetch_version(conn, model["id"], number)
    if row is None:
        raise not_found(f"version {number} of model", repr(model["name"]))
    return row


def _check_name(name: str | None) -> str:
    """Determined's rules: not blank, no double spaces or slashes, not all digits."""
    name = name or ""
    problem = ("must not be blank" if not name.strip() else
               f"at most {NAME_MAX} characters" if len(name) > NAME_MAX else
               "must not contain two spaces in a row" if "  " in name else
               "must not contain slashes" if "/" in name or "\\" in name else
               "must not be only digits (those name models by id)" if name.isdigit() else
               "must not contain control characters" if re.search(r"[\x00-\x1f\x7f]", name)
               else None)
    if problem:
        raise ApiError(400, "bad model name", [f"name: {problem}, got {name[:80]!r}"])
    return name


def _name_taken(name: str | None) -> ApiError:
    return ApiError(409, f"a model named {name!r} already exists",
                    ["name: model names are unique (case-sensitive)"])


def _check_text(field: str, value: str | None) -> str | None:
    if value is not None and (len(value) > TEXT_MAX or "\x00" in value):
        raise ApiError(400, f"bad {field}",
                       [f"{field}: at most {TEXT_MAX} characters, without NUL characters"])
    return value


def _check_labels(labels: list[str] | None) -> list[str] | None:
    if labels is None:
        return None
    if len(labels) > LABELS_MAX:
        raise ApiError(400, "too many labels", [f"labels: at most {LABELS_MAX}, got {len(labels)}"])
    for label in labels:
        if not label or len(label) > NAME_MAX or "\x00" in label:
            raise ApiError(400, "bad label",
                           [f"labels: each 1 to {NAME_MAX} characters, got {label[:80]!r}"])
    return list(dict.fromkeys(labels))


def _depth(value: Any) -> int:
    """How deeply `value` nests, without recursion (metadata comes from users)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def _check_metadata(metadata: Any) -> dict[str, Any] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise ApiError(400, "bad metadata",
                       [f"metadata: a mapping expected, got {type(metadata).__name__}"])
    if _depth(metadata) > MAX_CONFIG_DEPTH:
        raise ApiError(400, "bad metadata",
                       [f"metadata: nested deeper than {MAX_CONFIG_DEPTH} levels"])
    text = json.dumps(metadata)
    if len(text) > METADATA_MAX_BYTES or "\\u0000" in text:
        raise ApiError(400, "bad metadata", [f"metadata: at most {METADATA_MAX_BYTES} bytes of"
                                             f" JSON without NUL characters, got {len(text)}"])
    return metadata


async def _workspace_id(conn: asyncpg.Pool | asyncpg.Connection, workspace_id: int | None,
                        workspace_name: str | None) -> int | None:
    """The workspace a request names by id or by name; None when it names none."""
    if workspace_id:
        if not await workspace_exists(conn, workspace_id):
            raise ApiError(400, f"workspace {workspace_id} not found",
                           [f"workspaceId: no workspace has id {workspace_id}"])
        return workspace_id
    if workspace_name:
        found = await fetch_workspace_id(conn, workspace_name)
        if found is None:
            raise ApiError(400, f"workspace {workspace_name!r} not found",
                           [f"workspaceName: no workspace is named {workspace_name!r}"])
        return found
    return None


def _page_size(limit: int) -> int:
    """A page's size: what the client asks (0 is "all"), at most PAGE_MAX."""
    return min(limit or PAGE_MAX, PAGE_MAX)


# -- models ----------------------------------------------------------------------------------

class ModelBody(BaseModel):
    """Determined's v1PostModelRequest and v1PatchModel (every field optional in a patch)."""

    name: str | None = None
    description: str | None = None
    notes: str | None = None
    metadata: Any = None
    labels: list[str] | None = None
    workspaceId: int | None = None
    workspaceName: str | None = None


@router.get("/models", **answers(ModelList))
async def list_models(
    pool: Pool,
    name: str | None = None,
    description: str | None = None,
    id: int | None = None,  # noqa: A002 (Determined's name)
    archived: bool | None = None,
    labels: Annotated[list[str] | None, Query()] = None,
    users: Annotated[list[str] | None, Query()] = None,
    userIds: Annotated[list[int] | None, Query()] = None,  # noqa: N803 (Determined's names)
    workspaceIds: Annotated[list[int] | None, Query()] = None,  # noqa: N803
    workspaceNames: Annotated[list[str] | None, Query()] = None,  # noqa: N803
    sortBy: str = "SORT_BY_UNSPECIFIED",  # noqa: N803
    orderBy: str = "ORDER_BY_UNSPECIFIED",  # noqa: N803
    offset: int = Query(0, ge=0),
    limit: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetModels; `name` and `description` match case-insensitive substrings, and
    a page holds at most 1,000 models (the client pages on `endIndex` and `total`)."""
    if sortBy not in queries.MODEL_SORTS:
        raise ApiError(400, "bad sortBy", [f"sortBy: one of {', '.join(queries.MODEL_SORTS)}"])
    people = users or ([] if userIds else None)
    places = workspaceIds or ([] if workspaceNames else None)
    where = queries.ModelFilter(name or None, description or None, id, archived, labels or None,
                                people, userIds or [], places, workspaceNames or [])
    total = await queries.count_models(pool, where)
    shown = _page_size(limit)
    rows = await queries.fetch_models(pool, where, sortBy, descending=orderBy == "ORDER_BY_DESC",
                                      limit=shown, offset=offset)
    return {"models": [model_json(r) for r in rows],
            "pagination": views.pagination(offset, shown, len(rows), total)}


@router.get("/model/labels", **answers(ModelLabels))
async def model_labels(pool: Pool, workspaceId: int | None = None) -> dict[str, Any]:  # noqa: N803
    """Determined's GetModelLabels: every label in use, most used first."""
    return {"labels": await queries.fetch_model_labels(pool, workspaceId)}


@router.post("/models", **answers(ModelAnswer))
async def create_model(body: ModelBody, request: Request, pool: Pool) -> dict[str, Any]:
    principal = auth.current(request)
    name = _check_name(body.name)
    workspace = await _workspace_id(pool, body.workspaceId, body.workspaceName)
    try:
        model_id = await queries.insert_model(
            pool, name, _check_text("description", body.description) or "",
            _check_text("notes", body.notes) or "", _check_metadata(body.metadata) or {},
            _check_labels(body.labels) or [], principal.username,
            workspace or DEFAULT_PROJECT_ID)
    except asyncpg.UniqueViolationError:
        raise _name_taken(name) from None
    return {"model": model_json(await fetch_model(pool, str(model_id)))}


@router.get("/models/{model_name}", **answers(ModelAnswer))
async def get_model(model_name: str, pool: Pool) -> dict[str, Any]:
    return {"model": model_json(await fetch_model(pool, model_name))}


@router.patch("/models/{model_name}", **answers(ModelAnswer))
async def patch_model(
    model_name: str, body: ModelBody, pool: Pool
) -> dict[str, Any]:
    """Determined's PatchModel: the fields the body has replace the model's."""
    model = await fetch_model(pool, model_name)
    name = _check_name(body.name) if body.name is not None else None
    workspace = await _workspace_id(pool, body.workspaceId, body.workspaceName)
    try:
        await queries.update_model(
            pool, model["id"], name, _check_text("description", body.description),
            _check_text("notes", body.notes), _check_metadata(body.metadata),
            _check_labels(body.labels), workspace)
    except asyncpg.UniqueViolationError:
        raise _name_taken(name) from None
    return {"model": model_json(await fetch_model(pool, str(model["id"])))}


class MoveModelBody(BaseModel):
    destinationWorkspaceId: int
    modelName: str | None = None


@router.post("/models/{model_name}/move", **answers(Empty))
async def move_model(
    model_name: str, body: MoveModelBody, pool: Pool
) -> dict[str, Any]:
    model = await fetch_model(pool, model_name)
    workspace = await _workspace_id(pool, body.destinationWorkspaceId, None)
    if workspace is None:  # a model is always in a workspace
        raise ApiError(400, "no destination workspace",
                       ["destinationWorkspaceId: must name a workspace (ids start at 1)"])
    await queries.move_model(pool, model["id"], workspace)
    return {}


def _archive_route(archived: bool) -> None:
    verb = "archive" if archived else "unarchive"

    async def archive(model_name: str, pool: Pool) -> dict[str, Any]:
        model = await fetch_model(pool, model_name)
        await queries.set_model_archived(pool, model["id"], archived)
        return {}

    archive.__name__ = f"{verb}_model"
    router.post(f"/models/{{model_name}}/{verb}", summary=f"{verb.capitalize()} a model",
                **answers(Empty))(archive)


_archive_route(True)
_archive_route(False)


@router.delete("/models/{model_name}", **answers(Empty))
async def delete_model(model_name: str, pool: Pool) -> dict[str, Any]:
    """Delete a model and its versions; their checkpoints stay (GC may take them afterwards)."""
    model = await fetch_model(pool, model_name)
    await queries.delete_model(pool, model["id"])
    return {}


# -- versions --------------------------------------------------------------------------------

class VersionBody(BaseModel):
    """Determined's v1PostModelVersionRequest and v1PatchModelVersion."""

    checkpointUuid: str | None = None
    modelName: str | None = None
    name: str | None = None
    comment: str | None = None
    notes: str | None = None
    metadata: Any = None
    labels: list[str] | None = None


@router.get("/models/{model_name}/versions", **answers(ModelVersionList))
async def list_versions(
    model_name: str,
    pool: Pool,
    sortBy: str = "SORT_BY_UNSPECIFIED",  # noqa: N803 (Determined's names)
    orderBy: str = "ORDER_BY_UNSPECIFIED",  # noqa: N803
    offset: int = Query(0, ge=0),
    limit: int = Query(0, ge=0),
) -> dict[str, Any]:
    if sortBy not in queries.VERSION_SORTS:
        raise ApiError(400, "bad sortBy", [f"sortBy: one of {', '.join(queries.VERSION_SORTS)}"])
    model = await fetch_model(pool, model_name)
    shown = _page_size(limit)
    rows = await queries.fetch_versions(pool, model["id"], sortBy,
                                        descending=orderBy == "ORDER_BY_DESC", limit=shown,
                                        offset=offset)
    return {"model": model_json(model),
            "modelVersions": await _versions_json(pool, model, rows),
            "pagination": views.pagination(offset, shown, len(rows), model["num_versions"])}


@router.post("/models/{model_name}/versions", **answers(ModelVersionAnswer))
async def register_version(
    model_name: str, body: VersionBody, request: Request, pool: Pool
) -> dict[str, Any]:
    """Register a COMPLETED checkpoint as the model's next version.

    The checkpoint's row is locked while the version is written, and checkpoint GC marks rows
    DELETED under the same lock before it removes files: either the GC sees this version and
    keeps the checkpoint, or this sees the checkpoint DELETED and refuses.
    """
    try:
        checkpoint = uuidlib.UUID(body.checkpointUuid or "")
    except ValueError:
        raise ApiError(400, "bad checkpointUuid", [
            f"checkpointUuid: a checkpoint's UUID expected, got {body.checkpointUuid!r}"]) from None
    async with pool.acquire() as conn, conn.transaction():
        model = await fetch_model(conn, model_name, lock=True)
        owner = str(auth.current(request).username)
        if model["archived"]:
            raise ApiError(409, f"model {model['name']!r} is archived: unarchive it to register"
                                " new versions")
        state = await queries.lock_checkpoint_state(conn, checkpoint)
        if state is None:
            raise not_found("checkpoint", checkpoint)
        if state != CheckpointState.COMPLETED:
            raise ApiError(409, f"checkpoint {checkpoint} is {state}: only a COMPLETED"
                                " checkpoint can be a model version")
        version = await queries.insert_version(
            conn, model["id"], checkpoint, _check_text("name", body.name) or "",
            _check_text("comment", body.comment) or "", _check_text("notes", body.notes) or "",
            _check_metadata(body.metadata) or {}, _check_labels(body.labels) or [], owner)
        await queries.touch_model(conn, model["id"])
    return await get_version(str(model["id"]), version, pool)


@router.get("/models/{model_name}/versions/{version}", **answers(ModelVersionAnswer))
async def get_version(model_name: str, version: int, pool: Pool) -> dict[str, Any]:
    model = await fetch_model(pool, model_name)
    row = await _fetch_version_row(pool, model, version)
    return {"modelVersion": (await _versions_json(pool, model, [row]))[0]}


@router.patch("/models/{model_name}/versions/{version}", **answers(ModelVersionAnswer))
async def patch_version(
    model_name: str, version: int, body: VersionBody, pool: Pool
) -> dict[str, Any]:
    """Determined's PatchModelVersion: name, comment, notes, labels, metadata (the checkpoint
    of a version never changes: register a new version instead)."""
    model = await fetch_model(pool, model_name)
    row = await _fetch_version_row(pool, model, version)
    await queries.update_version(
        pool, row["id"], _check_text("name", body.name), _check_text("comment", body.comment),
        _check_text("notes", body.notes), _check_metadata(body.metadata),
        _check_labels(body.labels))
    return await get_version(str(model["id"]), version, pool)


@router.delete("/models/{model_name}/versions/{version}", **answers(Empty))
async def delete_version(
    model_name: str, version: int, pool: Pool
) -> dict[str, Any]:
    """Delete one version; its checkpoint stays (its experiment's GC already ran)."""
    model = await fetch_model(pool, model_name)
    row = await _fetch_version_row(pool, model, version)
    await queries.delete_version(pool, row["id"])
    return {}


@router.get("/models/{model_name}/versions/{version}/metrics", include_in_schema=False)
async def version_metrics(model_name: str, version: int) -> dict[str, Any]:
    """Determined's inference metrics per model version come from `det.experimental`'s
    batch-inference tracking, which Epochal does not keep (out of the schema: not served)."""
    raise ApiError(501, "metrics of model versions (batch-inference tracking) are not served"
                        " by Epochal")


# -- aliases (Epochal's, as MLflow's) -----------------------------------------------------------

class AliasBody(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)


async def _aliases_json(pool: asyncpg.Pool, model_id: int) -> dict[str, Any]:
    return {"aliases": [
        {"alias": a.alias, "version": a.version, "username": a.owner,
         "lastUpdatedTime": views.rfc3339(a.updated_at)}
        for a in await registry.aliases(pool, model_id)]}


@router.get("/models/{model_name}/aliases", **answers(ModelAliases))
async def list_aliases(model_name: str, pool: Pool) -> dict[str, Any]:
    model = await fetch_model(pool, model_name)
    return await _aliases_json(pool, model["id"])


@router.put("/models/{model_name}/aliases/{alias}", **answers(ModelAliases))
async def set_alias(
    model_name: str, alias: str, body: AliasBody, request: Request, pool: Pool
) -> dict[str, Any]:
    """Point the alias at a version of the model (moving it from another); the model's aliases."""
    model = await fetch_model(pool, model_name)
    await registry.set_alias(pool, model["id"], alias, body.version,
                             str(auth.current(request).username))
    await queries.touch_model(pool, model["id"])
    return await _aliases_json(pool, model["id"])


@router.delete("/models/{model_name}/aliases/{alias}", **answers(ModelAliases))
async def delete_alias(model_name: str, alias: str, pool: Pool) -> dict[str, Any]:
    model = await fetch_model(pool, model_name)
    await registry.delete_alias(pool, model["id"], registry.check_alias(alias))
    return await _aliases_json(pool, model["id"])


@router.get("/models/{model_name}/aliases/{alias}", **answers(ModelVersionAnswer))
async def get_version_by_alias(model_name: str, alias: str, pool: Pool) -> dict[str, Any]:
    """The version the alias points at (what a deployment reads: `production`)."""
    model = await fetch_model(pool, model_name)
    version = await registry.alias_version(pool, model["id"], registry.check_alias(alias))
    return await get_version(str(model["id"]), version, pool)

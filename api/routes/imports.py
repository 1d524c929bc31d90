"""Importing a Determined cluster's history (`epochal import determined`; admins only): the
routes translate HTTP and call services/history_import, which owns the mapping."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field, StringConstraints

from api.deps import AppSettings, Pool
from api.schemas import answers
from api.schemas import imports as schemas
from services import history_import
from services.history_import import models as item_models

router = APIRouter(prefix="/api/v1", tags=["imports"])

Short = Annotated[str, StringConstraints(max_length=1000)]
ExternalId = Annotated[str, Path(min_length=1, max_length=100)]


class SourceRequest(BaseModel):
    """The source's `GET /api/v1/master` fields."""

    kind: Literal["determined"] = "determined"
    url: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    clusterId: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    clusterName: Short = ""
    version: Short = ""


@router.post("/imports", **answers(schemas.ImportSource))
async def register_source(body: SourceRequest, pool: Pool) -> dict[str, Any]:
    """One source per clusterId: a second call answers the same id and updates url, name and
    version."""
    source_id, created = await history_import.register_source(
        pool, url=body.url, cluster_id=body.clusterId, cluster_name=body.clusterName,
        version=body.version)
    return {"sourceId": source_id, "created": created}


@router.get("/imports/{source_id}/objects", **answers(schemas.ImportedObjects))
async def imported_objects(
    source_id: int, pool: Pool, kind: Annotated[str, Query(max_length=50)],
    offset: int = Query(0, ge=0),
    limit: int = Query(1000, ge=1, le=history_import.MAX_OBJECTS_PAGE),
) -> dict[str, Any]:
    """What the target holds from the source (`kind` singular or the POST route's plural)."""
    rows, total = await history_import.list_objects(
        pool, source_id, history_import.stored_kind(kind), offset, limit)
    return {"objects": [{"externalId": r["external_id"], "localId": r["local_id"],
                         "done": r["done"], "sourceState": r["source_state"]} for r in rows],
            "total": total}


class DoneRequest(BaseModel):
    kind: Literal["trial", "experiment", "trial-logs"]
    externalIds: list[Annotated[str, StringConstraints(max_length=100)]] = Field(
        max_length=10_000)
    sourceStates: list[Short] = Field([], max_length=10_000)


@router.post("/imports/{source_id}/done", **answers(schemas.Marked))
async def mark_done(source_id: int, body: DoneRequest, pool: Pool) -> dict[str, Any]:
    return {"marked": await history_import.mark_done(pool, source_id, body.kind,
                                                     body.externalIds, body.sourceStates)}


class MetricsRequest(BaseModel):
    group: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    reports: list[dict[str, Any]] = Field(max_length=item_models.MAX_REPORTS)


@router.post("/imports/{source_id}/trials/{external_trial_id}/metrics",
             **answers(schemas.Written))
async def import_metrics(source_id: int, external_trial_id: ExternalId, body: MetricsRequest,
                         pool: Pool) -> dict[str, Any]:
    written, warnings = await history_import.import_metrics(
        pool, source_id, external_trial_id, body.group, body.reports)
    return {"written": written, "warnings": warnings}


class LogsRequest(BaseModel):
    restart: bool = False
    logs: list[dict[str, Any]] = Field(max_length=item_models.MAX_REPORTS)


@router.post("/imports/{source_id}/trials/{external_trial_id}/logs",
             **answers(schemas.Written))
async def import_logs(source_id: int, external_trial_id: ExternalId, body: LogsRequest,
                      pool: Pool) -> dict[str, Any]:
    written = await history_import.import_logs(pool, source_id, external_trial_id,
                                               body.restart, body.logs)
    return {"written": written}


class ItemsRequest(BaseModel):
    items: list[dict[str, Any]] = Field(max_length=item_models.MAX_ITEMS)


@router.post("/imports/{source_id}/{kind}", **answers(schemas.ImportResults))
async def import_items(source_id: int, kind: Annotated[str, Path(max_length=50)],
                       body: ItemsRequest, pool: Pool, settings: AppSettings) -> dict[str, Any]:
    """A page of the source's objects of one kind, as it answered them (users, workspaces,
    projects, templates, experiments, trials, checkpoints, models, model-versions)."""
    results = await history_import.import_items(pool, settings, source_id, kind, body.items)
    return {"results": [r.json() for r in results]}

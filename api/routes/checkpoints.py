"""Checkpoints: the harness reports each one it stores; anyone can look one up."""

from __future__ import annotations

import os
import uuid as uuidlib
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api import auth, schemas, views
from api.deps import Pool
from api.errors import ApiError, not_found
from api.routes.tasks import trial_of_task
from api.schemas import documented
from workflows.expconf import shared_fs_directory

router = APIRouter(prefix="/api/v1", tags=["checkpoints"])

MAX_PATCHED_CHECKPOINTS = 1_000


class CheckpointTraining(BaseModel):
    trialId: int | None = None
    experimentId: int | None = None


class ReportCheckpointRequest(BaseModel):
    uuid: uuidlib.UUID
    taskId: str
    allocationId: str | None = None
    reportTime: datetime | None = None
    resources: dict[str, int] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: str = "STATE_COMPLETED"
    training: CheckpointTraining | None = None


def storage_path(config: dict[str, Any], uuid: str) -> str:
    """Where a checkpoint lives: shared_fs `host_path[/storage_path]/<uuid>`, as both Epochal's
    harness and Determined's client (seeing it as `directory` storage) write it; S3 a URL."""
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "s3":  # as Determined's S3StorageManager names its objects
        prefix = str(storage.get("prefix") or "").strip("/")
        return f"s3://{storage['bucket']}/{prefix + '/' if prefix else ''}{uuid}"
    return os.path.join(shared_fs_directory(storage) or "", uuid)


@router.post("/checkpoints")
async def report_checkpoint(
    body: ReportCheckpointRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    trial_id = trial_of_task(body.taskId, "taskId")
    await auth.require_trial_write(request, trial_id)
    if body.training and body.training.trialId not in (None, trial_id):
        raise ApiError(400, f"training.trialId: {body.training.trialId} does not match taskId")
    steps = body.metadata.get("steps_completed")
    if not isinstance(steps, int) or steps < 0:
        raise ApiError(400, "metadata.steps_completed: expected a whole number >= 0")
    config = await pool.fetchval(
        "SELECT e.config FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.id = $1",
        trial_id,
    )
    if config is None:
        raise not_found("trial", trial_id)
    uuid = str(body.uuid)
    await pool.execute(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, steps_completed,"
        " metadata, resources, storage_path, state, report_time)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, now()))"
        " ON CONFLICT (uuid) DO UPDATE SET metadata = EXCLUDED.metadata,"
        "   resources = EXCLUDED.resources, state = EXCLUDED.state"
        " WHERE checkpoints.trial_id = EXCLUDED.trial_id",
        uuid,
        trial_id,
        body.taskId,
        body.allocationId or "",
        steps,
        body.metadata,
        body.resources,
        storage_path(config, uuid),
        body.state.removeprefix("STATE_"),
        body.reportTime,
    )
    return {}


class RemainingResources(BaseModel):
    resources: dict[str, int] | None = None


class PatchCheckpoint(BaseModel):
    uuid: uuidlib.UUID
    resources: RemainingResources | None = None


class PatchCheckpointsRequest(BaseModel):
    checkpoints: list[PatchCheckpoint] = Field(max_length=MAX_PATCHED_CHECKPOINTS)


@router.patch("/checkpoints")
async def patch_checkpoints(
    body: PatchCheckpointsRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    """What is left of checkpoints after their files were deleted (Determined's Core API
    `checkpoint.delete()`): no resources left means the checkpoint is DELETED."""
    uuids = [c.uuid for c in body.checkpoints]
    rows = await pool.fetch(
        "SELECT uuid, trial_id FROM checkpoints WHERE uuid = ANY($1::uuid[])", uuids
    )
    trial_of = {row["uuid"]: row["trial_id"] for row in rows}
    for checkpoint_uuid in uuids:
        if checkpoint_uuid not in trial_of:
            raise not_found("checkpoint", checkpoint_uuid)
    for trial_id in sorted(set(trial_of.values())):
        await auth.require_trial_write(request, trial_id)
    for patch in body.checkpoints:
        if patch.resources is None:
            continue
        remaining = patch.resources.resources or {}
        await pool.execute(
            "UPDATE checkpoints SET resources = $2,"
            " state = CASE WHEN $3 THEN 'DELETED' ELSE state END WHERE uuid = $1",
            patch.uuid,
            remaining,
            not remaining,
        )
    return {}


@router.get("/checkpoints/{checkpoint_uuid}", responses=documented(schemas.CheckpointAnswer))
async def get_checkpoint(checkpoint_uuid: uuidlib.UUID, pool: Pool) -> dict[str, Any]:
    row = await pool.fetchrow(views.CHECKPOINT_SELECT + " WHERE c.uuid = $1", checkpoint_uuid)
    if row is None:
        raise not_found("checkpoint", checkpoint_uuid)
    return {"checkpoint": views.checkpoint_json(row, row["searcher_metric"])}

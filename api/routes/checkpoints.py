"""Checkpoints: the harness reports each one it stores; anyone can look one up; the owner's
trials upload and download S3 checkpoints through URLs presigned here, the owner downloads
any checkpoint as a tar stream and deletes checkpoints (`det checkpoint delete`)."""

from __future__ import annotations

import asyncio
import tarfile
import time
import uuid as uuidlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import asyncpg
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from api import auth, views
from api.deps import AppSettings, Pool
from api.errors import ApiError, not_found
from api.queries import checkpoints as checkpoint_queries
from api.queries import trials as trial_queries
from api.schemas import Empty, answers
from api.schemas import checkpoints as checkpoint_schemas
from api.settings import Settings
from common import tracing
from common.checkpoint_storage import (
    MAX_FILES,
    MAX_PARTS,
    CheckpointFiles,
    S3Store,
    StorageError,
    UnsafeCheckpointPath,
    storage_path,
)
from common.states import CheckpointState
from services import checkpoint_files as files_service

router = APIRouter(prefix="/api/v1", tags=["checkpoints"])

MAX_PATCHED_CHECKPOINTS = 1_000
MAX_DELETED_CHECKPOINTS = 1_000


class ReportedTraining(BaseModel):
    trialId: int | None = None
    experimentId: int | None = None


class ReportCheckpointRequest(BaseModel):
    uuid: uuidlib.UUID
    taskId: str
    allocationId: str | None = None
    reportTime: datetime | None = None
    resources: dict[str, int] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: str = views.state_name(CheckpointState.COMPLETED)
    training: ReportedTraining | None = None


def files_storage_type(config: dict[str, Any]) -> str:
    return str((config.get("checkpoint_storage") or {}).get("type") or "shared_fs")


def _s3_of(config: dict[str, Any], settings: Settings, uuid: str) -> S3Store:
    files = files_service.files_of(config, settings)
    if files.s3 is None:
        raise ApiError(400, f"checkpoint {uuid}: the experiment's checkpoint_storage is "
                       f"{files.storage.get('type')!r}, not s3: its files are read and written "
                       "in place")
    return files.s3


async def _check_stored(files: CheckpointFiles, uuid: str, resources: dict[str, int]) -> None:
    """An S3 checkpoint is recorded COMPLETED only when every file reported is stored, whole."""
    if files.s3 is None:
        return
    try:
        stored = await asyncio.to_thread(files.s3.listing, uuid)
    except StorageError as err:
        raise ApiError(400, f"checkpoint {uuid} not recorded: {err}") from None
    for path, size in resources.items():
        if path.endswith("/"):
            continue  # Determined lists directories too
        if stored.get(path) != size:
            found = "missing" if path not in stored else f"{stored[path]} bytes"
            raise ApiError(400, f"checkpoint {uuid} not recorded: {path} is {found} in "
                           f"{files.s3.location.url(uuid)}, expected {size} bytes")


@router.post("/checkpoints", **answers(Empty))
async def report_checkpoint(
    body: ReportCheckpointRequest, request: Request, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    trial_id = views.trial_of_task(body.taskId, "taskId")
    await auth.require_trial_write(request, trial_id)
    if body.training and body.training.trialId not in (None, trial_id):
        raise ApiError(400, f"training.trialId: {body.training.trialId} does not match taskId")
    steps = body.metadata.get("steps_completed")
    if not isinstance(steps, int) or steps < 0:
        raise ApiError(400, "metadata.steps_completed: expected a whole number >= 0")
    config = await trial_queries.fetch_experiment_config_of_trial(pool, trial_id)
    if config is None:
        raise not_found("trial", trial_id)
    uuid = str(body.uuid)
    if body.state.removeprefix("STATE_") == CheckpointState.COMPLETED:
        try:
            files = CheckpointFiles.of(config, settings.checkpoint_storage)
        except StorageError:
            files = None  # an experiment stored before S3 needed credentials the master has
        if files is not None:
            await _check_stored(files, uuid, body.resources)
    await checkpoint_queries.upsert_checkpoint(
        pool,
        uuid,
        trial_id,
        body.taskId,
        body.allocationId or "",
        steps,
        body.metadata,
        body.resources,
        storage_path(config.get("checkpoint_storage") or {}, uuid),
        body.state.removeprefix("STATE_"),
        body.reportTime,
    )
    tracing.count("epochal.checkpoints", storage=str(files_storage_type(config)))
    return {}


class RemainingResources(BaseModel):
    resources: dict[str, int] | None = None


class PatchCheckpoint(BaseModel):
    uuid: uuidlib.UUID
    resources: RemainingResources | None = None


class PatchCheckpointsRequest(BaseModel):
    checkpoints: list[PatchCheckpoint] = Field(max_length=MAX_PATCHED_CHECKPOINTS)


@router.patch("/checkpoints", **answers(Empty))
async def patch_checkpoints(
    body: PatchCheckpointsRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    """What is left of checkpoints after their files were deleted (Determined's Core API
    `checkpoint.delete()`): no resources left means the checkpoint is DELETED."""
    uuids = [c.uuid for c in body.checkpoints]
    rows = await checkpoint_queries.fetch_checkpoint_trial_ids(pool, uuids)
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
        await checkpoint_queries.update_checkpoint_resources(
            pool, patch.uuid, remaining, not remaining
        )
    return {}


class DeleteCheckpointsRequest(BaseModel):
    """Determined's DeleteCheckpoints (`det checkpoint delete UUID[,UUID...]`)."""

    checkpointUuids: list[uuidlib.UUID] = Field(min_length=1,
                                                max_length=MAX_DELETED_CHECKPOINTS)


@router.delete("/checkpoints", **answers(Empty))
async def delete_checkpoints(
    body: DeleteCheckpointsRequest, request: Request, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    """Delete checkpoints (their files, then they are DELETED), as checkpoint GC does; only
    their experiments' owners and admins, and none registered as a model version."""
    uuids = sorted(set(body.checkpointUuids))
    rows = await checkpoint_queries.fetch_checkpoint_experiments(pool, uuids)
    missing = sorted({str(u) for u in uuids} - {r["uuid"] for r in rows})
    if missing:
        raise ApiError(404, f"checkpoints {', '.join(missing)} not found")
    by_experiment: dict[int, list[str]] = {}
    configs: dict[int, dict[str, Any]] = {}
    for row in rows:
        by_experiment.setdefault(row["experiment_id"], []).append(row["uuid"])
        configs[row["experiment_id"]] = row["config"]
    for experiment_id in sorted(by_experiment):
        await auth.require_owner(request, experiment_id, "delete checkpoints of")
    registered = await checkpoint_queries.fetch_registrations(pool, uuids)
    if registered:
        # Determined's words (master/internal/api_checkpoint.go).
        listed = ", ".join(f"{r['uuid']}, registered to {r['name']} (model #{r['model_id']}),"
                           f" version {r['version']}" for r in registered)
        raise ApiError(400, "this subset of checkpoints provided are in the model registry "
                            f"and cannot be deleted: {listed}.")
    await files_service.delete_checkpoints(pool, settings, by_experiment, configs)
    return {}


@router.get("/checkpoints/{checkpoint_uuid}", **answers(checkpoint_schemas.CheckpointAnswer))
async def get_checkpoint(checkpoint_uuid: uuidlib.UUID, pool: Pool) -> dict[str, Any]:
    row = await checkpoint_queries.fetch_checkpoint(pool, checkpoint_uuid)
    if row is None:
        raise not_found("checkpoint", checkpoint_uuid)
    return {"checkpoint": views.checkpoint_json(row, row["searcher_metric"])}


# -- S3 checkpoints' files: presigned for the harness -----------------------------------------

class StartUploadRequest(BaseModel):
    taskId: str
    files: dict[str, int] = Field(max_length=MAX_FILES,
                                  description="Each file's path inside the checkpoint: its size")


class CompletedFile(BaseModel):
    path: str
    uploadId: str
    etags: list[str] = Field(max_length=MAX_PARTS, description="Each part's ETag, in order")


class CompleteUploadRequest(BaseModel):
    taskId: str
    files: list[CompletedFile] = Field(max_length=MAX_FILES)


async def _writable_checkpoint(
    pool: asyncpg.Pool, request: Request, checkpoint_uuid: uuidlib.UUID, task_id: str
) -> tuple[int, dict[str, Any]]:
    """The trial (and its experiment's config) a trial may upload checkpoint files for: its
    own, and only a checkpoint not yet recorded (files of a recorded one never change)."""
    trial_id = views.trial_of_task(task_id, "taskId")
    await auth.require_trial_write(request, trial_id)
    config = await trial_queries.fetch_experiment_config_of_trial(pool, trial_id)
    if config is None:
        raise not_found("trial", trial_id)
    if await checkpoint_queries.checkpoint_exists(pool, checkpoint_uuid):
        raise ApiError(409, f"checkpoint {checkpoint_uuid} is already recorded: a new "
                       "checkpoint needs a new uuid")
    return trial_id, config


@router.post("/checkpoints/{checkpoint_uuid}/upload", **answers(checkpoint_schemas.UploadPlan))
async def start_checkpoint_upload(
    checkpoint_uuid: uuidlib.UUID, body: StartUploadRequest, request: Request, pool: Pool,
    settings: AppSettings,
) -> dict[str, Any]:
    """Presigned PUTs for the files of a checkpoint the harness is storing in S3 (a large file:
    one per part, completed with `.../upload/complete`)."""
    _, config = await _writable_checkpoint(pool, request, checkpoint_uuid, body.taskId)
    uuid = str(checkpoint_uuid)
    s3 = _s3_of(config, settings, uuid)
    try:
        plan = await asyncio.to_thread(s3.upload_plan, uuid, body.files)
    except ValueError as err:
        raise ApiError(400, f"files: {err}") from None
    except StorageError as err:
        raise ApiError(400, f"checkpoint {uuid}: {err}") from None
    return {"files": plan}


@router.post("/checkpoints/{checkpoint_uuid}/upload/complete", **answers(Empty))
async def complete_checkpoint_upload(
    checkpoint_uuid: uuidlib.UUID, body: CompleteUploadRequest, request: Request, pool: Pool,
    settings: AppSettings,
) -> dict[str, Any]:
    _, config = await _writable_checkpoint(pool, request, checkpoint_uuid, body.taskId)
    uuid = str(checkpoint_uuid)
    s3 = _s3_of(config, settings, uuid)
    for done in body.files:
        try:
            await asyncio.to_thread(s3.complete_upload, uuid, done.path, done.uploadId,
                                    done.etags)
        except ValueError as err:
            raise ApiError(400, f"files: {err}") from None
        except StorageError as err:
            raise ApiError(400, f"checkpoint {uuid}: {err}") from None
    return {}


async def _readable_checkpoint(
    pool: asyncpg.Pool, request: Request, checkpoint_uuid: uuidlib.UUID, settings: Settings
) -> tuple[CheckpointFiles, str]:
    row = await checkpoint_queries.fetch_checkpoint_storage(pool, checkpoint_uuid)
    if row is None:
        raise not_found("checkpoint", checkpoint_uuid)
    if row["state"] != CheckpointState.COMPLETED:
        raise ApiError(409, f"checkpoint {checkpoint_uuid} is {row['state']}: its files are "
                       "gone or incomplete")
    return files_service.files_of(row["config"], settings), row["storage_path"]


@router.get("/checkpoints/{checkpoint_uuid}/files", **answers(checkpoint_schemas.DownloadPlan))
async def checkpoint_files(
    checkpoint_uuid: uuidlib.UUID, request: Request, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    """Presigned GETs of an S3 checkpoint's files (what the harness's restore_path fetches)."""
    files, path = await _readable_checkpoint(pool, request, checkpoint_uuid, settings)
    uuid = str(checkpoint_uuid)
    if files.s3 is None:
        raise ApiError(400, f"checkpoint {uuid} is on shared_fs at {path}: read it there, or "
                       f"download it from /api/v1/checkpoints/{uuid}/download")
    try:
        return {"files": await asyncio.to_thread(files.s3.download_plan, uuid)}
    except StorageError as err:
        raise ApiError(400, f"checkpoint {uuid}: {err}") from None


@router.get("/checkpoints/{checkpoint_uuid}/download", response_class=StreamingResponse)
async def download_checkpoint(
    checkpoint_uuid: uuidlib.UUID, request: Request, pool: Pool, settings: AppSettings
) -> StreamingResponse:
    """The checkpoint's files as one tar stream, from either storage (`epochal checkpoint
    download`, the dashboard)."""
    files, path = await _readable_checkpoint(pool, request, checkpoint_uuid, settings)
    try:
        listing = await asyncio.to_thread(files.listing, path)
    except (StorageError, UnsafeCheckpointPath) as err:
        raise ApiError(400, f"checkpoint {checkpoint_uuid}: {err}") from None
    except FileNotFoundError:
        raise ApiError(404, f"checkpoint {checkpoint_uuid}: {path} is not on the master's "
                       "host") from None
    return StreamingResponse(
        _tar_stream(files, path, listing), media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{checkpoint_uuid}.tar"'})


def _tar_stream(files: CheckpointFiles, path: str, listing: dict[str, int]) -> Iterator[bytes]:
    """A tar archive of `listing`, written as its files are read (no temporary copy)."""
    for name, size in listing.items():
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, int(time.time())
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        for chunk in files.read(path, name):
            chunk = chunk[: size - sent]
            sent += len(chunk)
            yield chunk
            if sent >= size:
                break
        if sent < size:  # the file shrank while read: pad, so the archive stays readable
            yield bytes(size - sent)
        if size % tarfile.BLOCKSIZE:
            yield bytes(tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE)
    yield bytes(2 * tarfile.BLOCKSIZE)

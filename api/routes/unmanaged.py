"""Determined's routes for detached ("unmanaged") trials, which `core_v2` calls from a script
outside the cluster (api/unmanaged.py says what they do). Its log shipper posts to `/task-logs`,
outside /api/v1."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field

from api import auth, unmanaged, views
from api.deps import Pool
from api.errors import ApiError, not_found
from api.queries import logs as log_queries
from api.queries import trials as trial_queries
from api.schemas import Empty, answers
from api.schemas import trials as trial_schemas

router = APIRouter(tags=["unmanaged"])

MAX_LOG_LINE = 64 * 1024  # characters of one shipped line


class CreateTrialRequest(BaseModel):
    experimentId: int
    hparams: dict[str, Any] | None = None
    unmanaged: bool = False


class PutTrialRequest(BaseModel):
    createTrialRequest: CreateTrialRequest
    externalTrialId: str = Field(min_length=1, max_length=unmanaged.MAX_EXTERNAL_ID)


class StartTrialRequest(BaseModel):
    trialId: int | None = None
    resume: bool = False


class StartTrialAnswer(BaseModel):
    """Determined's v1StartTrialResponse."""

    trialRunId: int
    stepsCompleted: int
    latestCheckpoint: str | None = None


class PatchTrialRequest(BaseModel):
    trialId: int | None = None
    state: Literal["STATE_ACTIVE", "STATE_RUNNING", "STATE_COMPLETED", "STATE_ERROR",
                   "STATE_CANCELED"] | None = None


class ShippedLine(BaseModel):
    """A line of Determined's unmanaged log shipper (core/_log_shipper.py)."""

    task_id: str = Field(max_length=64)
    timestamp: datetime | None = None
    log: str = Field(max_length=MAX_LOG_LINE)
    rank: str | None = Field(None, max_length=16)


async def _trial_answer(pool: Pool, trial_id: int) -> dict[str, Any]:
    row = await trial_queries.fetch_trial_row(pool, trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    return {"trial": views.trial_json(row)}


async def _create(request: Request, pool: Pool, body: CreateTrialRequest,
                  external_id: str | None) -> dict[str, Any]:
    if not body.unmanaged:
        raise ApiError(400, "only unmanaged trials are made this way: the cluster's searcher "
                       "makes the trials it runs", ["unmanaged: must be true"])
    await auth.require_owner(request, body.experimentId, "add trials to")
    trial_id = await unmanaged.create_trial(pool, body.experimentId, body.hparams, external_id)
    return await _trial_answer(pool, trial_id)


@router.post("/api/v1/trials", **answers(trial_schemas.TrialAnswer))
async def create_trial(body: CreateTrialRequest, request: Request, pool: Pool
                       ) -> dict[str, Any]:
    """Determined's CreateTrial: a trial of the caller's unmanaged experiment."""
    return await _create(request, pool, body, None)


@router.put("/api/v1/trials", **answers(trial_schemas.TrialAnswer))
async def put_trial(body: PutTrialRequest, request: Request, pool: Pool) -> dict[str, Any]:
    """Determined's PutTrial: the experiment's trial with this external id, made the first
    time (core_v2's `external_trial_id`: a script run again resumes its trial)."""
    return await _create(request, pool, body.createTrialRequest, body.externalTrialId)


@router.post("/api/v1/trials/{trial_id}/start", **answers(StartTrialAnswer))
async def start_trial(trial_id: int, body: StartTrialRequest, pool: Pool) -> dict[str, Any]:
    """Determined's StartTrial: a new run of the unmanaged trial, resuming from its latest
    checkpoint when `resume`."""
    started = await unmanaged.start_run(pool, trial_id, body.resume)
    row = await trial_queries.fetch_trial_row(pool, trial_id)
    assert row is not None
    return {"trialRunId": started["run_id"], "stepsCompleted": started["steps_completed"],
            "latestCheckpoint": row["latest_checkpoint_uuid"] if body.resume else None}


@router.patch("/api/v1/trials/{trial_id}", **answers(trial_schemas.TrialAnswer))
async def patch_trial(trial_id: int, body: PatchTrialRequest, pool: Pool) -> dict[str, Any]:
    """Determined's PatchTrial: a detached run's heartbeat (no state), or its state (RUNNING
    when it starts, COMPLETED or ERROR when it ends)."""
    state = body.state.removeprefix("STATE_") if body.state else None
    await unmanaged.report_state(pool, trial_id, state)
    return await _trial_answer(pool, trial_id)


@router.post("/task-logs", **answers(Empty))
async def post_shipped_lines(
    lines: Annotated[list[ShippedLine], Body(max_length=views.MAX_LOGS_PER_REQUEST)],
    request: Request, pool: Pool,
) -> dict[str, Any]:
    """The output of a detached trial's script, as its log shipper sends it; its owner's (or
    the trial's own token's) to write."""
    rows: list[log_queries.TaskLogRow] = []
    for i, line in enumerate(lines):
        trial_id = views.trial_of_task(line.task_id, f"[{i}].task_id")
        rows.append((trial_id, line.task_id, None, None, "stdout", "LOG_LEVEL_INFO",
                     line.log.rstrip("\n").replace("\x00", ""),
                     line.timestamp or datetime.now().astimezone()))
    for trial_id in sorted({row[0] for row in rows}):
        await views.require_trial(pool, trial_id)
        await auth.require_trial_write(request, trial_id)
    if rows:
        await log_queries.insert_task_logs(pool, rows)
    return {}

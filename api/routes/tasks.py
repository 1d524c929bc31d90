"""What a running task sends and asks: its logs, and whether it should stop (preemption)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from api import auth, views
from api.deps import Pool, Preemption
from api.errors import ApiError, not_found
from api.queries import logs as log_queries
from api.queries import trials as trial_queries
from api.schemas import Empty, answers
from api.schemas.tasks import PreemptionSignal
from common import tracing
from common.temporal_names import is_task_uuid

router = APIRouter(prefix="/api/v1", tags=["tasks"])

class TaskLog(BaseModel):
    taskId: str
    allocationId: str | None = None
    agentId: str | None = None
    containerId: str | None = None
    rankId: int | None = None
    timestamp: datetime | None = None
    level: str | None = None
    stdtype: str | None = None
    source: str | None = None
    log: str


class PostTaskLogsRequest(BaseModel):
    logs: list[TaskLog] = Field(max_length=views.MAX_LOGS_PER_REQUEST)


@router.post("/task/logs", **answers(Empty))
async def post_task_logs(
    body: PostTaskLogsRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    """Lines of trials (task ids `EXP.TRIAL`), and of interactive tasks (UUIDs), which only
    agents ship; lines of a trial or task that does not exist are dropped."""
    trial_rows: list[log_queries.TaskLogRow] = []
    task_rows: list[log_queries.TaskLineRow] = []
    for i, log in enumerate(body.logs):
        line = (log.taskId, log.allocationId, log.agentId, log.stdtype, log.level,
                log.log.replace("\x00", ""), log.timestamp or datetime.now().astimezone())
        if is_task_uuid(log.taskId):
            task_rows.append(line)
        else:
            trial_rows.append((views.trial_of_task(log.taskId, f"logs[{i}].taskId"), *line))
    if task_rows:  # a task's output comes from the agent that runs it
        auth.require_agent(auth.current(request), f"write the logs of task {task_rows[0][0]}")
    for trial_id in sorted({row[0] for row in trial_rows}):
        await auth.require_trial_write(request, trial_id)
    if trial_rows:
        await log_queries.insert_task_logs(pool, trial_rows)
    if task_rows:
        await log_queries.insert_task_lines(pool, task_rows)
    return {}


def _allocation_ids(allocation_id: str) -> tuple[int, int]:
    """(trial id, run id) of an allocation id `EXP.TRIAL.RUN`."""
    parts = allocation_id.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ApiError(400, f"allocationId: {allocation_id!r} is not EXP.TRIAL.RUN")
    return int(parts[1]), int(parts[2])


async def _allocation_trial(pool: Pool, allocation_id: str) -> tuple[int, int, int]:
    trial_id, run_id = _allocation_ids(allocation_id)
    row = await trial_queries.fetch_trial_run(pool, trial_id)
    if row is None:
        raise not_found("allocation", allocation_id)
    return trial_id, run_id, row["run_id"]


@router.get("/allocations/{allocation_id}/signals/preemption", **answers(PreemptionSignal))
async def allocation_preemption_signal(
    allocation_id: str,
    request: Request,
    pool: Pool,
    watch: Preemption,
    timeoutSeconds: int = Query(60, ge=0, le=3600),
    # Determined's Core API spells it this way (grpc-gateway accepts both).
    timeout_seconds: int | None = Query(None, ge=0, le=3600),
) -> dict[str, bool]:
    """Long-poll: answers at once when the allocation should stop, else after the timeout (or
    when the caller hangs up). It reads the trial's row again only when the row changes
    (api/preemption.py)."""
    if timeout_seconds is not None:
        timeoutSeconds = timeout_seconds
    trial_id, run_id = _allocation_ids(allocation_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeoutSeconds
    gone: asyncio.Future[object] = asyncio.ensure_future(_disconnected(request))
    try:
        async with watch.watching(trial_id) as changes:
            while True:
                with tracing.untraced():  # one span for the poll, not one per look
                    row = await trial_queries.fetch_trial_run(pool, trial_id)
                if row is None:
                    raise not_found("allocation", allocation_id)
                # An allocation older than the trial's current run is stale: it should stop.
                if row["preempt_requested"] or row["run_id"] != run_id:
                    return {"preempt": True}
                if loop.time() >= deadline or gone.done():
                    return {"preempt": False}
                await changes.wait(deadline - loop.time(), gone)
    finally:
        gone.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client hangs up (a trial that exited leaves its poll behind)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.post("/allocations/{allocation_id}/signals/ack_preemption", **answers(Empty))
async def ack_allocation_preemption(allocation_id: str, pool: Pool) -> dict[str, Any]:
    await _allocation_trial(pool, allocation_id)
    return {}

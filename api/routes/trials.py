"""Trials: describe, logs, and what the harness reports (metrics, progress, early exit)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api import auth, unmanaged, views
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError, not_found, require_choice
from api.log_stream import LogFilter, trial_log_stream
from api.queries import checkpoints as checkpoint_queries
from api.queries import metrics as metric_queries
from api.queries import trials as trial_queries
from api.queries import users as user_queries
from api.schemas import Empty, answers
from api.schemas import checkpoints as checkpoint_schemas
from api.schemas import trials as trial_schemas
from common import metric_groups, tracing
from common.states import TERMINAL_STATES, TrialState
from common.temporal_names import TrialMessages, trial_workflow_id
from services import log_retention, search_gate

router = APIRouter(prefix="/api/v1", tags=["trials"])

MAX_REPORTS_PER_BATCH = 10_000
# A trial's run may train for days; its session ends with the trial (or the next run) first.
TRIAL_SESSION_TTL = timedelta(days=7)


class Metrics(BaseModel):
    avgMetrics: dict[str, Any] = Field(default_factory=dict)
    batchMetrics: list[dict[str, Any]] | None = None


class TrialMetrics(BaseModel):
    trialId: int
    trialRunId: int = 0
    stepsCompleted: int = Field(ge=0)
    metrics: Metrics


class ReportTrialMetricsRequest(BaseModel):
    metrics: TrialMetrics
    group: Literal["training", "validation"] | str = "training"


class ReportTrialMetricsBatch(BaseModel):
    reports: list[ReportTrialMetricsRequest] = Field(max_length=MAX_REPORTS_PER_BATCH)


class EarlyExit(BaseModel):
    reason: Literal[
        "EXITED_REASON_INVALID_HP",
        "EXITED_REASON_USER_REQUESTED_STOP",
        "EXITED_REASON_UNSPECIFIED",
    ]


class ReportEarlyExitRequest(BaseModel):
    earlyExit: EarlyExit


def _clean(metrics: dict[str, Any], where: str) -> dict[str, Any]:
    """Numbers stay, NaN and infinities become null; anything else is refused."""
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if value is None or isinstance(value, str | bool | int):
            out[name] = value
        elif isinstance(value, float):
            out[name] = value if math.isfinite(value) else None
        else:
            raise ApiError(400, f"{where}.{name}: expected a number, got {type(value).__name__}")
    return out


async def store_reports(
    pool: Pool, temporal: Client, trial_id: int, reports: list[ReportTrialMetricsRequest]
) -> tuple[int, bool]:
    """Upsert by (trial, group, steps): a retried report replaces its row instead of doubling
    it. Returns how many were stored and whether the searcher stopped the trial on one (the
    validations go through the search gate: services/search_gate.py)."""
    rows = []
    for index, report in enumerate(reports):
        if report.metrics.trialId != trial_id:
            raise ApiError(
                400,
                f"reports[{index}].metrics.trialId: is {report.metrics.trialId}, "
                f"but the path names trial {trial_id}",
            )
        rows.append(
            (
                trial_id,
                report.metrics.trialRunId,
                report.group,
                report.metrics.stepsCompleted,
                _clean(report.metrics.metrics.avgMetrics, f"reports[{index}].metrics.avgMetrics"),
            )
        )
    if not rows:
        return 0, False
    await views.require_trial(pool, trial_id)
    validations = [r for r in reports if r.group == "validation"]
    async with pool.acquire() as conn, conn.transaction():
        # One statement for the whole batch, not one round trip per report; a batch naming
        # the same (group, step) twice keeps the last, as one-by-one upserts would.
        latest = list({(r[2], r[3]): r for r in rows}.values())
        await metric_queries.upsert_metrics(
            conn,
            trial_id,
            [r[1] for r in latest],
            [r[2] for r in latest],
            [r[3] for r in latest],
            [r[4] for r in latest],
        )
        if validations:
            await trial_queries.refresh_best_validation(conn, [trial_id])
        steps = [r[3] for r in rows if r[2] != metric_groups.SYSTEM]  # those count time
        if steps:
            await trial_queries.raise_steps_completed(conn, trial_id, max(steps))
    for group in {r[2] for r in rows}:
        tracing.count("epochal.metric.reports", sum(1 for r in rows if r[2] == group),
                      group=group)
    stopped = bool(validations) and await search_gate.notify_searcher(
        pool, temporal, trial_id,
        [search_gate.Validation(r.metrics.stepsCompleted, r.metrics.metrics.avgMetrics)
         for r in validations])
    return len(rows), stopped


@router.get("/trials/{trial_id}", **answers(trial_schemas.TrialAnswer))
async def get_trial(trial_id: int, pool: Pool) -> dict[str, Any]:
    row = await trial_queries.fetch_trial_row(pool, trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    trial = views.trial_json(row)
    trial["summaryMetrics"] = await views.fetch_summary_metrics(pool, trial_id)
    return {"trial": trial}


@router.post("/trials/{trial_id}/metrics", **answers(Empty))
async def report_trial_metrics(
    trial_id: int, body: ReportTrialMetricsRequest, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    await store_reports(pool, temporal, trial_id, [body])
    return {}  # Determined's answer; its harness hears a stop through the preemption poll


@router.post("/trials/{trial_id}/metrics/batch", **answers(trial_schemas.MetricsBatchAnswer))
async def report_trial_metrics_batch(
    trial_id: int, body: ReportTrialMetricsBatch, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    """Epochal's harness: `preempt` is true when the searcher stopped the trial on one of
    these validations, so `should_preempt()` is true right after the report."""
    stored, stopped = await store_reports(pool, temporal, trial_id, body.reports)
    return {"stored": stored, "preempt": stopped}


class ProgressReport(BaseModel):
    """Determined's Core API form of a progress report; Epochal's harness sends the number."""

    progress: float
    is_raw: bool = True


@router.post("/trials/{trial_id}/progress", **answers(Empty))
async def report_trial_progress(
    trial_id: int, pool: Pool, body: Annotated[float | ProgressReport, Body()]
) -> dict[str, Any]:
    progress = body.progress if isinstance(body, ProgressReport) else body
    if not 0 <= progress <= 1:
        raise ApiError(400, "bad progress", [f"progress: must be within [0, 1], got {progress}"])
    await views.require_trial(pool, trial_id)
    await trial_queries.update_trial_progress(pool, trial_id, progress)
    return {}


@router.post("/trials/{trial_id}/kill", **answers(Empty))
async def kill_trial(
    trial_id: int, request: Request, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    """Determined's KillTrial (`det trial kill`): this trial ends CANCELED; its experiment and
    search go on, as when a trial is stopped by its user."""
    row = await trial_queries.fetch_trial_experiment_and_state(pool, trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    if row["state"] in TERMINAL_STATES:
        raise ApiError(409, f"trial {trial_id} is {row['state']}: it can no longer be killed")
    if (await unmanaged.trial_of(pool, trial_id))["unmanaged"]:
        # A script outside the cluster runs it: the cluster records its end, cannot stop it.
        await unmanaged.report_state(pool, trial_id, TrialState.CANCELED)
        return {}
    handle = temporal.get_workflow_handle(trial_workflow_id(row["experiment_id"], trial_id))
    try:
        await handle.signal(TrialMessages.KILL)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(409, f"trial {trial_id} is no longer running") from err
        raise
    return {}


@router.post("/trials/{trial_id}/user-session", **answers(trial_schemas.TrialUserSession))
async def open_trial_user_session(trial_id: int, pool: Pool) -> dict[str, Any]:
    """A session of the trial's owner for its running run's code: Determined gives every task
    one (DET_USER_TOKEN), which `det` and `det.experimental.Determined()` in a trial use. It
    replaces the one the trial's last run had, and the trial's end revokes it."""
    row = await trial_queries.fetch_trial_owner_account(pool, trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    if row["state"] in TERMINAL_STATES:
        raise ApiError(409, f"trial {trial_id} is {row['state']}: it runs no more")
    token = await auth.open_run_session(pool, row["user_id"], TRIAL_SESSION_TTL, "trials",
                                        trial_id)
    if await views.require_trial(pool, trial_id) in TERMINAL_STATES:  # it ended meanwhile
        await user_queries.delete_session(pool, auth._digest(token))
        raise ApiError(409, f"trial {trial_id} has ended: it runs no more")
    return {"userToken": token, "username": row["username"]}


@router.post("/trials/{trial_id}/early_exit", **answers(Empty))
async def report_trial_early_exit(
    trial_id: int, body: ReportEarlyExitRequest | EarlyExit, pool: Pool
) -> dict[str, Any]:
    # Determined's Core API sends the bare `{"reason": ...}`.
    reason = body.earlyExit.reason if isinstance(body, ReportEarlyExitRequest) else body.reason
    await views.require_trial(pool, trial_id)
    await trial_queries.update_early_exit_reason(pool, trial_id, reason)
    return {}


@router.get("/trials/{trial_id}/checkpoints", **answers(checkpoint_schemas.CheckpointList))
async def list_trial_checkpoints(
    trial_id: int,
    pool: Pool,
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
    sortByAttr: str = "SORT_BY_BATCH_NUMBER",
    sortByMetric: str | None = None,
    orderBy: views.OrderBy = "ORDER_BY_ASC",
    states: views.ListQuery = None,
) -> dict[str, Any]:
    """Determined's GetTrialCheckpoints (`det trial download` pages through it)."""
    require_choice("sortByAttr", sortByAttr, views.CHECKPOINT_SORT_KEYS)
    config = await trial_queries.fetch_experiment_config_of_trial(pool, trial_id)
    if config is None:
        raise not_found("trial", trial_id)
    rows = await checkpoint_queries.fetch_trial_checkpoints(pool, trial_id)
    return views.checkpoint_page(
        [views.checkpoint_json(r, r["searcher_metric"]) for r in rows], config, states=states,
        sort_by_attr=sortByAttr, sort_by_metric=sortByMetric, order_by=orderBy, offset=offset,
        limit=limit,
    )


@router.get("/trials/{trial_id}/workloads", **answers(trial_schemas.WorkloadList))
async def get_trial_workloads(
    trial_id: int,
    pool: Pool,
    offset: int = Query(0, ge=0),
    limit: int = Query(0, ge=0),
    orderBy: Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"] = "ORDER_BY_ASC",
    filter: str = "FILTER_OPTION_UNSPECIFIED",  # noqa: A002 (Determined's name)
) -> dict[str, Any]:
    """Determined's GetTrialWorkloads (`det trial describe`, `det experiment describe`):
    training, validation and checkpoint reports by step; limit 0 means all."""
    require_choice("filter", filter, views.WORKLOAD_FILTERS)
    await views.require_trial(pool, trial_id)
    workloads = await views.fetch_workloads(pool, trial_id, views.WORKLOAD_FILTERS[filter])
    if orderBy == "ORDER_BY_DESC":
        workloads.reverse()
    page = workloads[offset:offset + limit] if limit else workloads[offset:]
    return {
        "workloads": page,
        "pagination": views.pagination(offset, limit or len(workloads), len(page),
                                       len(workloads)),
    }


def _timestamp(value: str | None, field: str) -> str | None:
    """Normalized so it compares as text with the RFC 3339 timestamps logs carry."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC).isoformat()
    except ValueError as err:
        raise ApiError(400, f"bad {field}", [f"{field}: expected an RFC 3339 time"]) from err


@router.get("/trials/{trial_id}/logs")
async def trial_logs(
    trial_id: int,
    pool: Pool,
    follow: bool = False,
    limit: int = Query(0, ge=0),
    orderBy: Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"] = "ORDER_BY_ASC",
    levels: Annotated[list[str] | None, Query()] = None,
    stdtypes: Annotated[list[str] | None, Query()] = None,
    agentIds: Annotated[list[str] | None, Query()] = None,
    searchText: str | None = None,
    timestampAfter: str | None = None,
    timestampBefore: str | None = None,
) -> StreamingResponse:
    """NDJSON `{"result": TrialLog}` lines (Determined's TrialLogs stream), in the order they
    were produced (api/log_stream.py). `limit` with orderBy DESC is `det trial logs --tail N`
    (newest first); with follow the stream ends once the trial is terminal and its logs are
    drained."""
    await views.require_trial(pool, trial_id)
    keep = LogFilter(
        levels={views.log_level(v) for v in levels} if levels else None,
        stdtypes=set(stdtypes) if stdtypes else None,
        agent_ids=set(agentIds) if agentIds else None,
        search_text=searchText or None,
        after=_timestamp(timestampAfter, "timestampAfter"),
        before=_timestamp(timestampBefore, "timestampBefore"),
    )
    return await trial_log_stream(pool, trial_id, keep, follow=follow, limit=limit,
                                  newest_first=orderBy == "ORDER_BY_DESC")


class RetainLogsRequest(BaseModel):
    """Determined's PutTrialRetainLogs (`det trial set log-retention ID --days N|--forever`)."""

    trialId: int | None = None
    numDays: int = Field(ge=log_retention.FOREVER, le=log_retention.MAX_DAYS,
                         description="Days the logs are kept after the trial ends; -1: for ever")


@router.put("/trials/{trial_id}/retain_logs", **answers(Empty))
async def retain_trial_logs(trial_id: int, body: RetainLogsRequest, pool: Pool) -> dict[str, Any]:
    """The trial's own log retention (services/log_retention.py)."""
    if body.trialId not in (None, trial_id):
        raise ApiError(400, "trialId does not match",
                       [f"trialId: is {body.trialId}, but the path names trial {trial_id}"])
    await log_retention.set_trial_retention(pool, trial_id, body.numDays)
    return {}


@router.post("/cleanup_logs", **answers(trial_schemas.CleanupLogsAnswer))
async def cleanup_logs(pool: Pool, settings: AppSettings) -> dict[str, Any]:
    """`det task cleanup-logs` (admins): delete expired trial logs now, not at the master's
    next round."""
    removed = await log_retention.clean_up_now(pool, settings.log_retention_days)
    return {"removedCount": str(removed)}

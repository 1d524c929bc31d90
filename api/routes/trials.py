"""Trials: describe, logs, and what the harness reports (metrics, progress, early exit)."""

from __future__ import annotations

import math
from typing import Any, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api import views
from api.deps import Pool, Temporal
from api.errors import ApiError, not_found
from api.log_stream import stream_logs
from workflows.constants import experiment_workflow_id
from workflows.types import ValidationReport

router = APIRouter(prefix="/api/v1", tags=["trials"])

MAX_REPORTS_PER_BATCH = 10_000


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


async def _require_trial(pool: Pool, trial_id: int) -> str:
    state: str | None = await pool.fetchval("SELECT state FROM trials WHERE id = $1", trial_id)
    if state is None:
        raise not_found("trial", trial_id)
    return state


async def store_reports(
    pool: Pool, temporal: Client, trial_id: int, reports: list[ReportTrialMetricsRequest]
) -> int:
    """Upsert by (trial, group, steps): a retried report replaces its row instead of doubling it."""
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
        return 0
    await _require_trial(pool, trial_id)
    validations = [r for r in reports if r.group == "validation"]
    async with pool.acquire() as conn, conn.transaction():
        await conn.executemany(
            "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics)"
            " VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT (trial_id, metric_group, steps_completed) DO UPDATE"
            " SET metrics = EXCLUDED.metrics, trial_run_id = EXCLUDED.trial_run_id,"
            "     report_time = now()",
            rows,
        )
        await conn.execute(
            "UPDATE trials SET steps_completed = GREATEST(steps_completed, $2) WHERE id = $1",
            trial_id,
            max(r[3] for r in rows),
        )
    if validations:
        await notify_searcher(pool, temporal, trial_id, validations)
    return len(rows)


async def notify_searcher(
    pool: Pool, temporal: Client, trial_id: int, validations: list[ReportTrialMetricsRequest]
) -> None:
    """Tell the experiment of the first validation at or past the length its searcher waits
    for (ASHA's rungs); other validations never reach the workflow."""
    row = await pool.fetchrow(
        "SELECT t.search_length, t.experiment_id, e.config -> 'searcher' AS searcher"
        " FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id = $1",
        trial_id,
    )
    if row is None or row["search_length"] is None:
        return
    searcher = row["searcher"]
    time_metric = searcher.get("time_metric")
    for report in sorted(validations, key=lambda r: r.metrics.stepsCompleted):
        values = report.metrics.metrics.avgMetrics
        metric = values.get(searcher["metric"])
        length = values.get(time_metric) if time_metric else report.metrics.stepsCompleted
        if not isinstance(metric, int | float) or not _is_number(metric):
            continue
        if not isinstance(length, int | float) or not _is_number(length):
            continue
        if length < row["search_length"]:
            continue
        handle = temporal.get_workflow_handle(experiment_workflow_id(row["experiment_id"]))
        try:
            await handle.signal(
                "validation_reported",
                ValidationReport(trial_id=trial_id, length=int(length), metric=float(metric)),
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return  # the experiment has ended
        # Signalled first, then the gate closes: a retry may signal twice (the workflow drops
        # the duplicate), never not at all. The experiment opens the gate at the next rung.
        await pool.execute(
            "UPDATE trials SET search_length = NULL WHERE id = $1 AND search_length <= $2",
            trial_id,
            int(length),
        )
        return


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@router.get("/trials/{trial_id}")
async def get_trial(trial_id: int, pool: Pool) -> dict[str, Any]:
    trial = await views.fetch_trial(pool, trial_id)
    if trial is None:
        raise not_found("trial", trial_id)
    return {"trial": trial}


@router.post("/trials/{trial_id}/metrics")
async def report_trial_metrics(
    trial_id: int, body: ReportTrialMetricsRequest, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    await store_reports(pool, temporal, trial_id, [body])
    return {}


@router.post("/trials/{trial_id}/metrics/batch")
async def report_trial_metrics_batch(
    trial_id: int, body: ReportTrialMetricsBatch, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    return {"stored": await store_reports(pool, temporal, trial_id, body.reports)}


@router.get("/trials/{trial_id}/metrics")
async def get_trial_metrics(
    trial_id: int,
    pool: Pool,
    group: str | None = None,
    startStep: int | None = Query(None, ge=0),
    endStep: int | None = Query(None, ge=0),
) -> dict[str, Any]:
    await _require_trial(pool, trial_id)
    rows = await pool.fetch(
        "SELECT * FROM metrics WHERE trial_id = $1 AND ($2::text IS NULL OR metric_group = $2)"
        " AND ($3::bigint IS NULL OR steps_completed >= $3)"
        " AND ($4::bigint IS NULL OR steps_completed <= $4)"
        " ORDER BY metric_group, steps_completed",
        trial_id,
        group,
        startStep,
        endStep,
    )
    return {"metrics": [views.metric_report(r) for r in rows]}


@router.post("/trials/{trial_id}/progress")
async def report_trial_progress(
    trial_id: int, pool: Pool, progress: float = Body(..., ge=0, le=1)
) -> dict[str, Any]:
    await _require_trial(pool, trial_id)
    await pool.execute("UPDATE trials SET progress = $2 WHERE id = $1", trial_id, progress)
    return {}


@router.post("/trials/{trial_id}/early_exit")
async def report_trial_early_exit(
    trial_id: int, body: ReportEarlyExitRequest, pool: Pool
) -> dict[str, Any]:
    await _require_trial(pool, trial_id)
    await pool.execute(
        "UPDATE trials SET early_exit_reason = $2 WHERE id = $1", trial_id, body.earlyExit.reason
    )
    return {}


@router.get("/trials/{trial_id}/checkpoints")
async def list_trial_checkpoints(trial_id: int, pool: Pool) -> dict[str, Any]:
    await _require_trial(pool, trial_id)
    rows = await pool.fetch(
        views.CHECKPOINT_SELECT + " WHERE c.trial_id = $1 ORDER BY c.steps_completed", trial_id
    )
    return {"checkpoints": [views.checkpoint_json(r, r["searcher_metric"]) for r in rows]}


@router.get("/trials/{trial_id}/logs")
async def trial_logs(trial_id: int, pool: Pool, follow: bool = False) -> StreamingResponse:
    await _require_trial(pool, trial_id)

    async def is_done() -> bool:
        return await _require_trial(pool, trial_id) in views.TERMINAL_STATES

    lines = stream_logs(pool, "l.trial_id = $1", trial_id, follow=follow, is_done=is_done)
    return StreamingResponse(lines, media_type="application/x-ndjson")

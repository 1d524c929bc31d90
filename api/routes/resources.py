"""The allocation history's reports, for admins (as Determined's `CanGetUsageDetails`):
`det resources raw|aggregated` as JSON under /api/v1, and as the CSV that `det` prints without
`--json` (and `det resources allocations`) under /resources/allocation/.

The inputs are checked and the answers built by api/allocation_reports.py; the SQL is
api/queries/resources.py; the rows are written by the master's activities as allocations start
and end (activities/allocation_history.py).
"""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Query
from fastapi.responses import Response

from api import allocation_reports as reports
from api.allocation_reports import Named, given
from api.deps import Pool
from api.errors import ApiError
from api.queries import resources as queries
from api.schemas import answers
from api.schemas.resources import AggregatedAllocations, RawAllocations

router = APIRouter(tags=["resources"])

CSV = "text/csv"

# Each parameter by both names: the gateway's camelCase and the snake_case `det` sends.
TimestampAfter = Annotated[str | None, Query(alias="timestampAfter",
                                             description="RFC 3339; the window's start")]
TimestampAfterSnake = Annotated[str | None, Query(alias="timestamp_after",
                                                  include_in_schema=False)]
TimestampBefore = Annotated[str | None, Query(alias="timestampBefore",
                                              description="RFC 3339; the window's end")]
TimestampBeforeSnake = Annotated[str | None, Query(alias="timestamp_before",
                                                   include_in_schema=False)]
StartDate = Annotated[str | None, Query(alias="startDate",
                                        description="YYYY-MM-DD (YYYY-MM monthly): the first")]
StartDateSnake = Annotated[str | None, Query(alias="start_date", include_in_schema=False)]
EndDate = Annotated[str | None, Query(alias="endDate",
                                      description="YYYY-MM-DD (YYYY-MM monthly): the last")]
EndDateSnake = Annotated[str | None, Query(alias="end_date", include_in_schema=False)]
PeriodParam = Annotated[str | None, Query(
    alias="period", description="RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY or _MONTHLY")]


async def _raw(pool: asyncpg.Pool, after: Named, before: Named) -> list[dict[str, Any]]:
    start, end = reports.raw_window(after, before)
    rows = await queries.fetch_raw(pool, start, end, reports.MAX_RAW_ALLOCATIONS + 1)
    if len(rows) > reports.MAX_RAW_ALLOCATIONS:
        raise ApiError(400, "too many allocations in the window", [
            f"{before.name}: more than {reports.MAX_RAW_ALLOCATIONS} allocations from"
            f" {after.name}; ask for a shorter window"])
    return [reports.raw_entry(row) for row in rows]


async def _aggregated(pool: asyncpg.Pool, start: Named, end: Named,
                      period: Named) -> list[dict[str, Any]]:
    window = reports.aggregated_window(start, end, period)
    rows = await queries.fetch_aggregated(pool, window.first, window.last, window.monthly)
    return reports.aggregated_entries(window, rows)


@router.get("/api/v1/resources/allocation/raw", **answers(RawAllocations))
async def allocation_raw(pool: Pool, after: TimestampAfter = None,
                         after_snake: TimestampAfterSnake = None,
                         before: TimestampBefore = None,
                         before_snake: TimestampBeforeSnake = None) -> dict[str, Any]:
    """Determined's ResourceAllocationRaw: every allocation overlapping the window."""
    return {"resourceEntries": await _raw(
        pool, given("timestampAfter", after, "timestamp_after", after_snake),
        given("timestampBefore", before, "timestamp_before", before_snake))}


@router.get("/api/v1/resources/allocation/aggregated", **answers(AggregatedAllocations))
async def allocation_aggregated(pool: Pool, start: StartDate = None,
                                start_snake: StartDateSnake = None, end: EndDate = None,
                                end_snake: EndDateSnake = None,
                                period: PeriodParam = None) -> dict[str, Any]:
    """Determined's ResourceAllocationAggregated: slot-seconds per UTC day or month."""
    return {"resourceEntries": await _aggregated(
        pool, given("startDate", start, "start_date", start_snake),
        given("endDate", end, "end_date", end_snake), Named("period", period))}


@router.get("/resources/allocation/raw", response_class=Response,
            responses={200: {"content": {CSV: {}}}})
async def allocation_raw_csv(pool: Pool, after: TimestampAfter = None,
                             after_snake: TimestampAfterSnake = None,
                             before: TimestampBefore = None,
                             before_snake: TimestampBeforeSnake = None) -> Response:
    """`det resources raw` without --json."""
    entries = await _raw(pool, given("timestampAfter", after, "timestamp_after", after_snake),
                         given("timestampBefore", before, "timestamp_before", before_snake))
    return Response(reports.raw_csv(entries), media_type=CSV)


@router.get("/resources/allocation/allocations-csv", response_class=Response,
            responses={200: {"content": {CSV: {}}}})
async def allocations_csv(pool: Pool, after: TimestampAfter = None,
                          after_snake: TimestampAfterSnake = None,
                          before: TimestampBefore = None,
                          before_snake: TimestampBeforeSnake = None) -> Response:
    """`det resources allocations`: one line per allocation with its slot-hours."""
    entries = await _raw(pool, given("timestampAfter", after, "timestamp_after", after_snake),
                         given("timestampBefore", before, "timestamp_before", before_snake))
    return Response(reports.allocations_csv(entries), media_type=CSV)


@router.get("/resources/allocation/aggregated", response_class=Response,
            responses={200: {"content": {CSV: {}}}})
async def allocation_aggregated_csv(pool: Pool, start: StartDate = None,
                                    start_snake: StartDateSnake = None, end: EndDate = None,
                                    end_snake: EndDateSnake = None,
                                    period: PeriodParam = None) -> Response:
    """`det resources aggregated` without --json."""
    entries = await _aggregated(
        pool, given("startDate", start, "start_date", start_snake),
        given("endDate", end, "end_date", end_snake), Named("period", period))
    return Response(reports.aggregated_csv(entries), media_type=CSV)

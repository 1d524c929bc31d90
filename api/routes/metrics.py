"""Reading metrics: one trial's reports, and downsampled series of several trials side by side.

`GET /trials/time-series` is Determined's CompareTrials (what its web UI draws learning curves
from); `GET /trials/{id}/metrics` is Epochal's own list of reports with the same filters;
`GET /trials/metrics/trial_metrics` is Determined's GetMetrics (`Trial.iter_metrics`, and what
`epochal import determined` reads a trial's reports by): every report, streamed in pages.

Downsampling happens in PostgreSQL (api/queries/metrics.py), one series (trial, group) at a
time, so a long series is never loaded whole into the master. A series of n points (after the
filters) with n above `maxDatapoints` (M) keeps:

- its first and last points, always;
- with exactly one metric named (a chart of one metric) and M >= 4: the series is cut into
  floor((M - 2) / 2) buckets of consecutive points and each bucket keeps the point with the
  lowest and the one with the highest value of that metric, so spikes survive;
- otherwise every k-th point, k = ceil((n - 1) / (M - 1)).

Either way at most M points come back, in step order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import Field

from api import views
from api.deps import Pool
from api.errors import ApiError, not_found
from api.queries import metrics as metric_queries
from api.queries import trials as trial_queries
from api.schemas import answers
from api.schemas import trials as trial_schemas

router = APIRouter(prefix="/api/v1", tags=["metrics"])

DEFAULT_MAX_DATAPOINTS = 200
MAX_DATAPOINTS = 100_000
MAX_TRIALS_PER_QUERY = 1_000
MAX_METRIC_NAMES = 100
# Reports per line of GetMetrics' stream (Determined's page size too).
STREAM_PAGE = 1000

# Determined's MetricType and the group each stands for.
METRIC_TYPE_GROUPS = {
    "METRIC_TYPE_TRAINING": "training",
    "METRIC_TYPE_VALIDATION": "validation",
    "METRIC_TYPE_PROFILING": "profiling",
}
GROUP_METRIC_TYPES = {group: kind for kind, group in METRIC_TYPE_GROUPS.items()}

INT32_MAX = 2**31 - 1
TrialId = Annotated[int, Path(ge=0, le=INT32_MAX)]
StepBound = Annotated[int | None, Query(ge=0, le=2**63 - 1)]
MetricNames = Annotated[list[str] | None, Query(max_length=MAX_METRIC_NAMES)]

def _group(group: str | None, metric_type: str | None) -> str | None:
    """The one group asked for, from `group` or Determined's `metricType` (both must agree)."""
    if metric_type is not None and metric_type != "METRIC_TYPE_UNSPECIFIED":
        from_type = METRIC_TYPE_GROUPS[metric_type]
        if group is not None and group != from_type:
            raise ApiError(
                400,
                "group and metricType disagree",
                [f"metricType: {metric_type} is group {from_type!r}, but group is {group!r}"],
            )
        return from_type
    return group or None


def _check_range(start: int | None, end: int | None) -> None:
    if start is not None and end is not None and start > end:
        raise ApiError(
            400,
            "empty step range",
            [f"startBatches: {start} is after endBatches {end}"],
        )


@router.get("/trials/time-series", **answers(trial_schemas.CompareTrialsAnswer))
async def compare_trials(
    pool: Pool,
    trialIds: Annotated[
        list[Annotated[int, Field(ge=0, le=INT32_MAX)]],
        Query(min_length=1, max_length=MAX_TRIALS_PER_QUERY),
    ],
    metricNames: MetricNames = None,
    group: str | None = None,
    metricType: Annotated[
        str | None,
        Query(pattern="^METRIC_TYPE_(UNSPECIFIED|TRAINING|VALIDATION|PROFILING)$"),
    ] = None,
    startBatches: StepBound = None,
    endBatches: StepBound = None,
    maxDatapoints: Annotated[int, Query(ge=2, le=MAX_DATAPOINTS)] = DEFAULT_MAX_DATAPOINTS,
) -> dict[str, Any]:
    """Downsampled metric series of several trials (Determined's CompareTrials)."""
    wanted_group = _group(group, metricType)
    _check_range(startBatches, endBatches)
    ids = list(dict.fromkeys(trialIds))
    trials = {t["id"]: views.trial_json(t) for t in await trial_queries.fetch_trial_rows(pool, ids)}
    missing = [i for i in ids if i not in trials]
    if missing:
        raise not_found("trial", missing[0])
    rows = await metric_queries.fetch_series(
        pool,
        ids,
        group=wanted_group,
        start=startBatches,
        end=endBatches,
        names=metricNames or None,
        max_points=maxDatapoints,
    )
    series: dict[int, dict[str, list[dict[str, Any]]]] = {i: {} for i in ids}
    for row in rows:
        series[row["trial_id"]].setdefault(row["metric_group"], []).append(
            {
                "batches": row["steps_completed"],
                "time": views.rfc3339(row["report_time"]),
                "epoch": None,
                "values": row["metrics"],
            }
        )
    return {
        "trials": [
            {
                "trial": trials[i],
                "metrics": [
                    {
                        "group": name,
                        "type": GROUP_METRIC_TYPES.get(name, "METRIC_TYPE_UNSPECIFIED"),
                        "data": data,
                    }
                    for name, data in series[i].items()
                ],
            }
            for i in ids
        ]
    }


@router.get("/trials/{trial_id}/metrics", **answers(trial_schemas.MetricReportList))
async def get_trial_metrics(
    trial_id: TrialId,
    pool: Pool,
    group: str | None = None,
    metricNames: MetricNames = None,
    startBatches: StepBound = None,
    endBatches: StepBound = None,
    maxDatapoints: Annotated[int | None, Query(ge=2, le=MAX_DATAPOINTS)] = None,
) -> dict[str, Any]:
    """A trial's reports in (group, step) order; every one unless `maxDatapoints` is given."""
    _check_range(startBatches, endBatches)
    await views.require_trial(pool, trial_id)
    rows = await metric_queries.fetch_series(
        pool,
        [trial_id],
        group=group or None,
        start=startBatches,
        end=endBatches,
        names=metricNames or None,
        max_points=maxDatapoints,
    )
    return {"metrics": [views.metric_report(r) for r in rows]}


def _report_struct(group: str, values: dict[str, Any]) -> dict[str, Any]:
    """A report's `metrics` as Determined's GetMetrics sends it: `validation_metrics` for the
    validation group, `avg_metrics` for every other (Epochal keeps no batch metrics)."""
    return {"validation_metrics" if group == "validation" else "avg_metrics": values}


async def _metric_pages(pool: Pool, trial_ids: list[int], group: str) -> AsyncIterator[bytes]:
    """`{"result": {"metrics": [MetricsReport...]}}` lines, a page of each trial's reports
    at a time (keyset by step), trial by trial in id order."""
    for trial_id in trial_ids:
        after = -1
        while True:
            rows = await metric_queries.fetch_report_page(pool, trial_id, group, after,
                                                          STREAM_PAGE)
            if rows:
                reports = [{
                    "trialId": r["trial_id"], "endTime": views.rfc3339(r["report_time"]),
                    "metrics": _report_struct(group, r["metrics"]),
                    "totalBatches": r["steps_completed"], "trialRunId": r["trial_run_id"],
                    "archived": False, "id": r["id"], "group": r["metric_group"],
                } for r in rows]
                yield (json.dumps({"result": {"metrics": reports}}) + "\n").encode()
                after = rows[-1]["steps_completed"]
            if len(rows) < STREAM_PAGE:
                break


@router.get("/trials/metrics/trial_metrics", response_class=StreamingResponse)
async def stream_trial_metrics(
    pool: Pool,
    trialIds: Annotated[
        list[Annotated[int, Field(ge=0, le=INT32_MAX)]],
        Query(min_length=1, max_length=MAX_TRIALS_PER_QUERY),
    ],
    group: Annotated[str, Query(min_length=1, max_length=255)],
) -> StreamingResponse:
    """Determined's GetMetrics: every report of `group` of the trials, as NDJSON, never the
    whole series in memory; 404 (before any line) for a trial that does not exist."""
    ids = sorted(set(trialIds))
    missing = sorted(set(ids) - await trial_queries.fetch_existing_trial_ids(pool, ids))
    if missing:
        raise not_found("trial", missing[0])
    return StreamingResponse(_metric_pages(pool, ids, group), media_type="application/x-ndjson")

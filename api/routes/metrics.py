"""Reading metrics: one trial's reports, and downsampled series of several trials side by side.

`GET /trials/time-series` is Determined's CompareTrials (what its web UI draws learning curves
from); `GET /trials/{id}/metrics` is Epochal's own list of reports with the same filters.

Downsampling happens in PostgreSQL, one series (trial, group) at a time, so a long series is
never loaded whole into the master. A series of n points (after the filters) with n above
`maxDatapoints` (M) keeps:

- its first and last points, always;
- with exactly one metric named (a chart of one metric) and M >= 4: the series is cut into
  floor((M - 2) / 2) buckets of consecutive points and each bucket keeps the point with the
  lowest and the one with the highest value of that metric, so spikes survive;
- otherwise every k-th point, k = ceil((n - 1) / (M - 1)).

Either way at most M points come back, in step order.
"""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Path, Query
from pydantic import Field

from api import views
from api.deps import Pool
from api.errors import ApiError, not_found

router = APIRouter(prefix="/api/v1", tags=["metrics"])

DEFAULT_MAX_DATAPOINTS = 200
MAX_DATAPOINTS = 100_000
MAX_TRIALS_PER_QUERY = 1_000
MAX_METRIC_NAMES = 100

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

# $1 trial ids, $2 group or NULL, $3 first step or NULL, $4 last step or NULL,
# $5 metric names or NULL (all), $6 max points per series or NULL (all),
# $7 the one metric whose per-bucket extremes are kept, or NULL (keep every k-th point).
_SERIES_SQL = """
WITH picked AS (
    SELECT m.trial_id, m.metric_group, m.steps_completed, m.trial_run_id, m.report_time,
           CASE WHEN $5::text[] IS NULL THEN m.metrics
                ELSE (SELECT coalesce(jsonb_object_agg(key, value), '{}'::jsonb)
                      FROM jsonb_each(m.metrics) WHERE key = ANY($5)) END AS metrics,
           CASE WHEN jsonb_typeof(m.metrics -> $7::text) = 'number'
                THEN (m.metrics ->> $7::text)::double precision END AS focus,
           row_number() OVER series - 1 AS rn,
           count(*) OVER (PARTITION BY m.trial_id, m.metric_group) AS n
    FROM metrics m
    WHERE m.trial_id = ANY($1::int[])
      AND ($2::text IS NULL OR m.metric_group = $2)
      AND ($3::bigint IS NULL OR m.steps_completed >= $3)
      AND ($4::bigint IS NULL OR m.steps_completed <= $4)
      AND ($5::text[] IS NULL OR m.metrics ?| $5)
    WINDOW series AS (PARTITION BY m.trial_id, m.metric_group ORDER BY m.steps_completed)
),
bucketed AS (
    SELECT p.*,
           CASE WHEN $7::text IS NULL OR $6::int IS NULL OR $6::int < 4 OR p.n <= $6::int
                THEN NULL ELSE p.rn * ((($6::int) - 2) / 2) / p.n END AS bucket
    FROM picked p
),
ranked AS (
    SELECT b.*,
           CASE WHEN b.bucket IS NULL THEN NULL ELSE row_number() OVER (
               PARTITION BY b.trial_id, b.metric_group, b.bucket
               ORDER BY b.focus ASC NULLS LAST, b.rn) END AS low,
           CASE WHEN b.bucket IS NULL THEN NULL ELSE row_number() OVER (
               PARTITION BY b.trial_id, b.metric_group, b.bucket
               ORDER BY b.focus DESC NULLS LAST, b.rn) END AS high
    FROM bucketed b
)
SELECT trial_id, metric_group, steps_completed, trial_run_id, report_time, metrics
FROM ranked
WHERE $6::int IS NULL OR n <= $6::int OR rn = 0 OR rn = n - 1
   OR (bucket IS NOT NULL AND (low = 1 OR high = 1))
   OR (bucket IS NULL
       AND rn % greatest(1, ceil((n - 1)::numeric / greatest(1, $6::int - 1)))::bigint = 0)
ORDER BY trial_id, metric_group, steps_completed
"""


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


async def fetch_series(
    conn: asyncpg.Pool | asyncpg.Connection,
    trial_ids: list[int],
    *,
    group: str | None,
    start: int | None,
    end: int | None,
    names: list[str] | None,
    max_points: int | None,
) -> list[asyncpg.Record]:
    """Metric rows of the trials, filtered and downsampled per (trial, group), in step order."""
    focus = names[0] if names is not None and len(names) == 1 and max_points else None
    return list(
        await conn.fetch(
            _SERIES_SQL, trial_ids, group, start, end, names, max_points, focus
        )
    )


@router.get("/trials/time-series")
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
    trials = {t["id"]: t for t in await views.fetch_trials_by_id(pool, ids)}
    missing = [i for i in ids if i not in trials]
    if missing:
        raise not_found("trial", missing[0])
    rows = await fetch_series(
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


@router.get("/trials/{trial_id}/metrics")
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
    rows = await fetch_series(
        pool,
        [trial_id],
        group=group or None,
        start=startBatches,
        end=endBatches,
        names=metricNames or None,
        max_points=maxDatapoints,
    )
    return {"metrics": [views.metric_report(r) for r in rows]}

"""Metrics: a trial's reports (training, validation, other groups), their summaries, and series
of several trials downsampled in PostgreSQL (the rules: api/routes/metrics.py)."""

from __future__ import annotations

from typing import Any

import asyncpg

from api.queries import Conn


async def fetch_trial_metrics(conn: Conn, trial_id: int, groups: list[str]) -> list[asyncpg.Record]:
    """A trial's metrics rows of `groups`, by step."""
    return list(await conn.fetch(
        "SELECT * FROM metrics WHERE trial_id = $1 AND metric_group = ANY($2)"
        " ORDER BY steps_completed",
        trial_id,
        groups,
    ))


async def fetch_checkpoint_workloads(conn: Conn, trial_id: int) -> list[asyncpg.Record]:
    """A trial's checkpoints as workloads list them, by step."""
    return list(await conn.fetch(
        "SELECT uuid::text AS uuid, steps_completed, report_time, state, metadata, resources"
        " FROM checkpoints WHERE trial_id = $1 ORDER BY steps_completed",
        trial_id,
    ))


async def fetch_metric_summaries(conn: Conn, trial_id: int) -> list[asyncpg.Record]:
    """Per group and numeric metric of a trial: count, sum, min, max and the last value."""
    return list(await conn.fetch(
        "SELECT m.metric_group, kv.key, count(*) AS count, sum((kv.value)::float8) AS sum,"
        " min((kv.value)::float8) AS min, max((kv.value)::float8) AS max,"
        " (array_agg((kv.value)::float8 ORDER BY m.steps_completed DESC))[1] AS last"
        " FROM metrics m, jsonb_each(m.metrics) kv"
        " WHERE m.trial_id = $1 AND jsonb_typeof(kv.value) = 'number'"
        " GROUP BY m.metric_group, kv.key ORDER BY m.metric_group, kv.key",
        trial_id,
    ))


async def upsert_metrics(
    conn: Conn,
    trial_id: int,
    trial_run_ids: list[int],
    groups: list[str],
    steps: list[int],
    values: list[dict[str, Any]],
) -> None:
    """One statement for a batch of a trial's reports (the lists side by side): a report of a
    (group, step) already stored replaces it instead of doubling it."""
    await conn.execute(
        "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics)"
        " SELECT $1, * FROM unnest($2::int[], $3::text[], $4::bigint[], $5::jsonb[])"
        " ON CONFLICT (trial_id, metric_group, steps_completed) DO UPDATE"
        " SET metrics = EXCLUDED.metrics, trial_run_id = EXCLUDED.trial_run_id,"
        "     report_time = now()",
        trial_id,
        trial_run_ids,
        groups,
        steps,
        values,
    )


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


async def fetch_series(
    conn: Conn,
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


async def fetch_report_page(
    conn: Conn, trial_id: int, group: str, after_steps: int, limit: int
) -> list[asyncpg.Record]:
    """One page of a trial's reports of `group` after step `after_steps`, by step: the keyset
    that streams a long series without holding it (Determined's GetMetrics)."""
    return list(await conn.fetch(
        "SELECT id, trial_id, trial_run_id, metric_group, steps_completed, metrics, report_time"
        " FROM metrics WHERE trial_id = $1 AND metric_group = $2 AND steps_completed > $3"
        " ORDER BY steps_completed LIMIT $4",
        trial_id,
        group,
        after_steps,
        limit,
    ))

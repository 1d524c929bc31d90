"""The allocation history's reads (`det resources raw|aggregated|allocations`): each allocation
overlapping a window, and slot-seconds per period clipped to it.

The table is written by the master's activities (activities/allocation_history.py). Names are
the current ones while the user and workspace exist (a rename shows under the new name), else
as they were when the allocation started; an experiment's labels are its current ones while it
exists. An allocation still holding its slots counts until now. Periods are UTC days or months,
computed in `timestamp` (UTC wall time), so no session time zone moves a boundary.
"""

from __future__ import annotations

from datetime import date, datetime, time

import asyncpg

from api.queries import Conn


def _allocations(after: str, before: str) -> str:
    """Each allocation with its current names, and its start and end (now, for one still open)
    in UTC wall time, of those overlapping the window [after, before) (SQL timestamptz)."""
    return f"""
SELECT a.allocation_id, a.task_id, a.task_type, a.experiment_id, a.trial_id, a.run_id,
       a.user_id, coalesce(u.username, a.username) AS username,
       a.workspace_id, coalesce(w.name, a.workspace_name) AS workspace_name,
       coalesce(e.labels, a.labels) AS labels, a.resource_pool, a.slots, a.agent_ids,
       a.start_time, a.end_time,
       a.start_time AT TIME ZONE 'UTC' AS starts,
       coalesce(a.end_time, greatest(a.start_time, now())) AT TIME ZONE 'UTC' AS ends
FROM allocation_history a
LEFT JOIN users u ON u.id = a.user_id
LEFT JOIN workspaces w ON w.id = a.workspace_id
LEFT JOIN experiments e ON e.id = a.experiment_id
WHERE tstzrange(a.start_time, coalesce(a.end_time, 'infinity'::timestamptz))
      && tstzrange({after}, {before})
"""


async def fetch_raw(conn: Conn, after: datetime, before: datetime,
                    limit: int) -> list[asyncpg.Record]:
    """The allocations overlapping [after, before), oldest first, at most `limit`, each with
    `seconds`: how long it held its slots within the window."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT *, extract(epoch FROM least(ends, $2::timestamptz AT TIME ZONE 'UTC')"
        " - greatest(starts, $1::timestamptz AT TIME ZONE 'UTC'))::float8 AS seconds"
        f" FROM ({_allocations('$1::timestamptz', '$2::timestamptz')}) a"
        " ORDER BY start_time, allocation_id LIMIT $3",
        after, before, limit)
    return rows


# Slot-seconds per period and per key of each grouping; $1 and $2 are the window's first and
# last period starts (UTC), $3 the period's length ('1 day' or '1 month'). `total` has the one
# key `total`.
_PERIOD = "$3::text::interval"
_AGGREGATED = f"""
WITH periods AS (
    SELECT p AS period_start, p + {_PERIOD} AS period_end
    FROM generate_series($1::timestamp, $2::timestamp, {_PERIOD}) AS p
),
allocations AS ({_allocations("$1::timestamp AT TIME ZONE 'UTC'",
                              f"($2::timestamp + {_PERIOD}) AT TIME ZONE 'UTC'")}),
pieces AS (
    SELECT p.period_start, a.username, a.workspace_name, a.resource_pool, a.labels,
           extract(epoch FROM least(a.ends, p.period_end) - greatest(a.starts, p.period_start))
           * a.slots AS seconds
    FROM periods p JOIN allocations a ON a.starts < p.period_end AND a.ends > p.period_start
)
SELECT period_start, aggregation_type, key, sum(seconds)::float8 AS seconds FROM (
    SELECT period_start, 'total' AS aggregation_type, 'total' AS key, seconds FROM pieces
    UNION ALL
    SELECT period_start, 'username', username, seconds FROM pieces
    UNION ALL
    SELECT period_start, 'workspace', coalesce(workspace_name, ''), seconds FROM pieces
    UNION ALL
    SELECT period_start, 'resource_pool', resource_pool, seconds FROM pieces
    UNION ALL
    SELECT period_start, 'experiment_label', label, seconds FROM pieces, unnest(labels) AS label
) grouped
GROUP BY period_start, aggregation_type, key
ORDER BY period_start, aggregation_type, key
"""


async def fetch_aggregated(conn: Conn, first: date, last: date,
                           monthly: bool) -> list[asyncpg.Record]:
    """(period_start, aggregation_type, key, seconds): slot-seconds within each UTC day (or
    month) from the one starting on `first` to the one starting on `last`, in all (`total`)
    and by username, workspace, resource pool and experiment label; periods with none are
    absent."""
    rows: list[asyncpg.Record] = await conn.fetch(
        _AGGREGATED, datetime.combine(first, time()), datetime.combine(last, time()),
        "1 month" if monthly else "1 day")
    return rows

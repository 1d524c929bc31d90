"""A source trial's metric reports and log lines, each request's in one statement.

Metrics are stored as the API stores its own reports (api/routes/trials.py): one row per
(trial, group, steps) holding the report's average metrics (Determined's `avg_metrics`; its
`batch_metrics`, which Epochal's reports do not keep, are left out), with the report's own time
and trial run id, then the trial's best validation and the experiment's best trial computed by
the same SQL functions (migrations 0009, 0013)."""

from __future__ import annotations

import math
from typing import Any

import asyncpg

from common import metric_groups
from services.errors import Invalid, not_found
from services.history_import import models as m
from services.history_import.mapping import local_int, remember, require_source


async def _trial(conn: asyncpg.Connection, source_id: int, external_trial_id: str) -> int:
    await require_source(conn, source_id)
    trial_id = (await local_int(conn, source_id, "trial", external_trial_id)
                if external_trial_id.isdigit() else None)
    if trial_id is None:
        raise not_found("imported trial of the source", external_trial_id[:50])
    return trial_id


_NOT_FINITE = ("NaN", "Infinity", "-Infinity")


def _metric_values(metrics: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The report's values: Determined's stream nests them under `validation_metrics` for the
    validation group and `avg_metrics` for the others (a mapping without either is taken as it
    is); numbers, text and booleans kept, NaN and infinities null (as the API stores them;
    Determined's JSON spells them "NaN", "Infinity"), and how many values of another type were
    left out."""
    for key in ("avg_metrics", "validation_metrics", "avgMetrics", "validationMetrics"):
        if key in metrics:
            values = metrics[key]
            break
    else:
        values = metrics
    if not isinstance(values, dict):
        return {}, 1
    kept: dict[str, Any] = {}
    dropped = 0
    for name, value in values.items():
        if (isinstance(value, float) and not math.isfinite(value)) or value in _NOT_FINITE:
            kept[name] = None
        elif value is None or isinstance(value, str | bool | int | float):
            kept[name] = value
        else:
            dropped += 1
    return kept, dropped


async def import_metrics(pool: asyncpg.Pool, source_id: int, external_trial_id: str,
                         group: str, raw_reports: list[Any]) -> tuple[int, list[str]]:
    """Write the reports not yet here (ON CONFLICT DO NOTHING: a report sent again is not
    written twice); archived ones are skipped. How many were written, and warnings."""
    reports = [m.parse(m.MetricsReport, raw, f"reports[{i}]")
               for i, raw in enumerate(raw_reports)]
    rows: dict[int, tuple[int, Any, dict[str, Any]]] = {}
    dropped = 0
    for report in reports:
        if report.archived:
            continue
        values, lost = _metric_values(report.metrics)
        dropped += lost
        rows[report.totalBatches] = (report.trialRunId, report.endTime, values)
    warnings = ([f"{dropped} metric values that are neither numbers nor text were left out"]
                if dropped else [])
    async with pool.acquire() as conn, conn.transaction():
        trial_id = await _trial(conn, source_id, external_trial_id)
        if not rows:
            return 0, warnings
        steps = list(rows)
        written = await conn.fetch(
            "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed,"
            " metrics, report_time)"
            " SELECT $1, r, $2, s, v, coalesce(t, now())"
            " FROM unnest($3::int[], $4::bigint[], $5::jsonb[], $6::timestamptz[]) AS u(r, s, v, t)"
            " ON CONFLICT (trial_id, metric_group, steps_completed) DO NOTHING RETURNING id",
            trial_id, group, [rows[s][0] for s in steps], steps, [rows[s][2] for s in steps],
            [rows[s][1] for s in steps])
        run_id = max(rows[s][0] for s in steps)
        counted = max(steps) if group != metric_groups.SYSTEM else 0
        await conn.execute(
            "UPDATE trials SET run_id = GREATEST(run_id, $2),"
            " steps_completed = GREATEST(steps_completed, $3) WHERE id = $1",
            trial_id, run_id, counted)
        if group == "validation" and written:
            await conn.execute("SELECT refresh_best_validation($1::int[])", [trial_id])
            await conn.execute(
                "UPDATE experiments e SET best_trial_id = best_trial(e.id) FROM trials t"
                " WHERE t.id = $1 AND e.id = t.experiment_id", trial_id)
    return len(written), warnings


async def import_logs(pool: asyncpg.Pool, source_id: int, external_trial_id: str,
                      restart: bool, raw_logs: list[Any]) -> int:
    """Write the trial's lines not yet here (by their id at the source); `restart` first
    deletes every line imported into the trial. How many were written."""
    logs = [m.parse(m.TrialLog, raw, f"logs[{i}]") for i, raw in enumerate(raw_logs)]
    for i, log in enumerate(logs):
        if log.id is None:
            raise Invalid("a log line has no id", [f"logs[{i}].id: required (the line's id at "
                                                    "the source keeps it from being written "
                                                    "twice)"])
    async with pool.acquire() as conn, conn.transaction():
        trial_id = await _trial(conn, source_id, external_trial_id)
        experiment_id = await conn.fetchval("SELECT experiment_id FROM trials WHERE id = $1",
                                            trial_id)
        if restart:
            await conn.execute("DELETE FROM task_logs WHERE trial_id = $1"
                               " AND import_log_id IS NOT NULL", trial_id)
        await remember(conn, source_id, "trial-logs", external_trial_id, trial_id)
        if not logs:
            return 0
        written = await conn.fetch(
            "INSERT INTO task_logs (trial_id, task_id, agent_id, stdtype, level, log, timestamp,"
            " import_log_id)"
            " SELECT $1, $2, a, s, l, g, coalesce(t, now()), i"
            " FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],"
            "  $8::text[]) AS u(a, s, l, g, t, i)"
            " ON CONFLICT (trial_id, import_log_id) WHERE import_log_id IS NOT NULL DO NOTHING"
            " RETURNING id",
            trial_id, f"{experiment_id}.{trial_id}", [log.agentId for log in logs],
            [log.stdtype for log in logs], [log.level for log in logs],
            [log.log if log.log is not None else (log.message or "") for log in logs],
            [log.timestamp for log in logs], [str(log.id) for log in logs])
    return len(written)

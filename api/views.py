"""Read-side queries and their JSON shapes (Determined's field names, camelCase).

Every route that shows an experiment, trial, checkpoint or log line builds it here, so the CLI,
the dashboard and Determined's client all see the same shape.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import asyncpg

JSON = dict[str, Any]

TERMINAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})


def state_name(state: str) -> str:
    return f"STATE_{state}"


def rfc3339(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _metric_value(metrics: JSON | None, name: str) -> float | None:
    if not metrics:
        return None
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def metric_report(row: asyncpg.Record | None, prefix: str = "") -> JSON | None:
    if row is None or row[f"{prefix}steps_completed"] is None:
        return None
    return {
        "group": row[f"{prefix}metric_group"],
        "stepsCompleted": row[f"{prefix}steps_completed"],
        "trialRunId": row[f"{prefix}trial_run_id"],
        "reportTime": rfc3339(row[f"{prefix}report_time"]),
        "metrics": row[f"{prefix}metrics"],
    }


_TRIAL_SELECT = """
SELECT t.*, e.config -> 'searcher' AS searcher,
       lv.metric_group AS lv_metric_group, lv.steps_completed AS lv_steps_completed,
       lv.trial_run_id AS lv_trial_run_id, lv.report_time AS lv_report_time,
       lv.metrics AS lv_metrics,
       bv.metric_group AS bv_metric_group, bv.steps_completed AS bv_steps_completed,
       bv.trial_run_id AS bv_trial_run_id, bv.report_time AS bv_report_time,
       bv.metrics AS bv_metrics,
       lc.uuid::text AS latest_checkpoint_uuid
FROM trials t
JOIN experiments e ON e.id = t.experiment_id
LEFT JOIN LATERAL (
    SELECT * FROM metrics m WHERE m.trial_id = t.id AND m.metric_group = 'validation'
    ORDER BY m.steps_completed DESC LIMIT 1) lv ON true
LEFT JOIN LATERAL (
    SELECT * FROM metrics m WHERE m.trial_id = t.id AND m.metric_group = 'validation'
      AND searcher_metric(m.metrics, e.config -> 'searcher') IS NOT NULL
    ORDER BY searcher_rank(m.metrics, e.config -> 'searcher'), m.steps_completed
    LIMIT 1) bv ON true
LEFT JOIN LATERAL (
    SELECT uuid FROM checkpoints c WHERE c.trial_id = t.id AND c.state = 'COMPLETED'
    ORDER BY c.steps_completed DESC, c.report_time DESC LIMIT 1) lc ON true
"""


def trial_json(row: asyncpg.Record) -> JSON:
    best = metric_report(row, "bv_")
    return {
        "id": row["id"],
        "experimentId": row["experiment_id"],
        "requestId": row["request_id"],
        "state": state_name(row["state"]),
        "hparams": row["hparams"],
        "seed": row["seed"],
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "restarts": row["restarts"],
        "runId": row["run_id"],
        "totalBatchesProcessed": row["steps_completed"],
        "progress": row["progress"],
        "latestValidation": metric_report(row, "lv_"),
        "bestValidation": best,
        "searcherMetricValue": _metric_value(best["metrics"], row["searcher"]["metric"])
        if best
        else None,
        "latestCheckpointUuid": row["latest_checkpoint_uuid"],
        "taskId": f"{row['experiment_id']}.{row['id']}",
        "agentId": row["agent_id"],
        "earlyExitReason": row["early_exit_reason"],
        "rung": row["rung"],
        "searcherStatus": row["search_status"],
    }


async def fetch_trial(conn: asyncpg.Pool | asyncpg.Connection, trial_id: int) -> JSON | None:
    row = await conn.fetchrow(_TRIAL_SELECT + " WHERE t.id = $1", trial_id)
    return trial_json(row) if row else None


async def fetch_trials(conn: asyncpg.Pool | asyncpg.Connection, experiment_id: int) -> list[JSON]:
    rows = await conn.fetch(
        _TRIAL_SELECT + " WHERE t.experiment_id = $1 ORDER BY t.id", experiment_id
    )
    return [trial_json(r) for r in rows]


def best_trial(trials: list[JSON], smaller_is_better: bool) -> JSON | None:
    scored = [t for t in trials if t["searcherMetricValue"] is not None]
    if not scored:
        return None
    sign = 1.0 if smaller_is_better else -1.0
    return min(scored, key=lambda t: (sign * t["searcherMetricValue"], t["id"]))


_EXPERIMENT_SELECT = """
SELECT e.id, e.name, e.description, e.labels, e.config, e.state, e.owner, e.progress,
       e.archived, e.best_trial_id, e.start_time, e.end_time,
       coalesce(array_agg(t.id ORDER BY t.id) FILTER (WHERE t.id IS NOT NULL), '{}') AS trial_ids,
       coalesce(avg(t.progress), 0) AS trial_progress,
       (SELECT searcher_metric(m.metrics, e.config -> 'searcher')
        FROM metrics m JOIN trials bt ON bt.id = m.trial_id
        WHERE bt.experiment_id = e.id AND m.metric_group = 'validation'
          AND searcher_metric(m.metrics, e.config -> 'searcher') IS NOT NULL
        ORDER BY searcher_rank(m.metrics, e.config -> 'searcher') LIMIT 1) AS best_validation
FROM experiments e LEFT JOIN trials t ON t.experiment_id = e.id
"""


def experiment_json(row: asyncpg.Record, trials: list[JSON] | None = None) -> JSON:
    config = row["config"]
    searcher = config["searcher"]
    best_id = row["best_trial_id"]
    best_validation = row["best_validation"]
    if trials is not None:
        best = best_trial(trials, searcher.get("smaller_is_better", True))
        if best is not None:
            best_id = best_id or best["id"]
            best_validation = best["searcherMetricValue"]
    terminal = row["state"] in TERMINAL_STATES
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"] or "",
        "labels": list(row["labels"]),
        "state": state_name(row["state"]),
        "searcherType": searcher["name"],
        "searcherMetric": searcher["metric"],
        "smallerIsBetter": searcher.get("smaller_is_better", True),
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "progress": row["progress"] if terminal else float(row["trial_progress"]),
        "numTrials": len(row["trial_ids"]),
        "trialIds": list(row["trial_ids"]),
        "bestTrialId": best_id,
        "bestValidation": best_validation,
        "archived": row["archived"],
        "username": row["owner"],
        "resourcePool": config["resources"]["resource_pool"],
    }


async def fetch_experiment_row(
    conn: asyncpg.Pool | asyncpg.Connection, experiment_id: int
) -> asyncpg.Record | None:
    return await conn.fetchrow(_EXPERIMENT_SELECT + " WHERE e.id = $1 GROUP BY e.id", experiment_id)


async def fetch_experiment_rows(
    conn: asyncpg.Pool | asyncpg.Connection,
    *,
    states: list[str] | None,
    include_archived: bool,
    order_desc: bool,
    limit: int,
    offset: int,
) -> tuple[list[asyncpg.Record], int]:
    where = ["($1::text[] IS NULL OR e.state = ANY($1))", "($2 OR NOT e.archived)"]
    clause = " WHERE " + " AND ".join(where)
    rows = await conn.fetch(
        _EXPERIMENT_SELECT
        + clause
        + f" GROUP BY e.id ORDER BY e.id {'DESC' if order_desc else 'ASC'} LIMIT $3 OFFSET $4",
        states,
        include_archived,
        limit,
        offset,
    )
    total = await conn.fetchval(
        "SELECT count(*) FROM experiments e" + clause, states, include_archived
    )
    return list(rows), total


def checkpoint_json(row: asyncpg.Record, searcher_metric: str | None = None) -> JSON:
    validation = row.get("validation", None)
    return {
        "uuid": row["uuid"],
        "taskId": row["task_id"],
        "allocationId": row["allocation_id"],
        "reportTime": rfc3339(row["report_time"]),
        "resources": row["resources"],
        "metadata": row["metadata"],
        "state": state_name(row["state"]),
        "storagePath": row["storage_path"],
        "training": {
            "trialId": row["trial_id"],
            "experimentId": row["experiment_id"],
            "hparams": row["hparams"],
            "validationMetrics": {"avgMetrics": validation} if validation else None,
            "searcherMetric": _metric_value(validation, searcher_metric)
            if searcher_metric
            else None,
        },
    }


CHECKPOINT_SELECT = """
SELECT c.uuid::text AS uuid, c.task_id, c.allocation_id, c.report_time, c.resources, c.metadata,
       c.state, c.storage_path, c.trial_id, c.steps_completed, t.experiment_id, t.hparams,
       m.metrics AS validation, e.config -> 'searcher' ->> 'metric' AS searcher_metric
FROM checkpoints c JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id
LEFT JOIN metrics m ON m.trial_id = c.trial_id AND m.metric_group = 'validation'
  AND m.steps_completed = c.steps_completed
"""


def log_json(row: asyncpg.Record) -> JSON:
    return {
        "id": row["id"],
        "trialId": row["trial_id"],
        "taskId": row["task_id"],
        "agentId": row["agent_id"],
        "timestamp": rfc3339(row["timestamp"]),
        "level": row["level"] or "LOG_LEVEL_INFO",
        "stdtype": row["stdtype"],
        "log": row["log"],
    }

"""Read-side queries and their JSON shapes (Determined's field names, camelCase).

Every route that shows an experiment, trial, checkpoint or log line builds it here, so the CLI,
the dashboard and Determined's client all see the same shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import Query

from api.errors import ApiError, not_found, require_choice

JSON = dict[str, Any]
# Query parameters of Determined's list routes.
OrderBy = Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"]
ListQuery = Annotated[list[str] | None, Query()]

# Determined's "Uncategorized" workspace and project (migration 0007): where experiments go
# unless told otherwise.
DEFAULT_PROJECT_ID = 1


def job_id(experiment_id: int) -> str:
    """An experiment's job in the job queue (GET /job-queues)."""
    return f"experiment-{experiment_id}"


def state_name(state: str) -> str:
    return f"STATE_{state}"


def rfc3339(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None:
        return None
    return ((end or datetime.now(UTC)) - start).total_seconds()


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
LEFT JOIN metrics bv ON bv.id = t.best_validation_id
LEFT JOIN LATERAL (
    SELECT uuid FROM checkpoints c WHERE c.trial_id = t.id AND c.state = 'COMPLETED'
    ORDER BY c.steps_completed DESC, c.report_time DESC LIMIT 1) lc ON true
"""


def validation_workload(row: asyncpg.Record, prefix: str) -> JSON | None:
    """A trial's latest or best validation: Determined's MetricsWorkload (`totalBatches`,
    `endTime`, `metrics.avgMetrics`) with Epochal's `group`, `stepsCompleted`, `trialRunId`,
    `reportTime`."""
    report = metric_report(row, prefix)
    if report is None:
        return None
    return {
        **report,
        "metrics": {"avgMetrics": report["metrics"]},
        "totalBatches": report["stepsCompleted"],
        "numInputs": 0,
        "endTime": report["reportTime"],
    }


def trial_json(row: asyncpg.Record) -> JSON:
    best = validation_workload(row, "bv_")
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
        "latestValidation": validation_workload(row, "lv_"),
        "bestValidation": best,
        "searcherMetricValue": row["searcher_metric_value"],
        "latestCheckpointUuid": row["latest_checkpoint_uuid"],
        "taskId": f"{row['experiment_id']}.{row['id']}",
        "taskIds": [f"{row['experiment_id']}.{row['id']}"],
        "wallClockTime": _seconds_between(row["start_time"], row["end_time"]),
        "agentId": row["agent_id"],
        "earlyExitReason": row["early_exit_reason"],
        "rung": row["rung"],
        "searcherStatus": row["search_status"],
    }



async def require_trial(conn: asyncpg.Pool | asyncpg.Connection, trial_id: int) -> str:
    """The trial's state (without the STATE_ prefix); 404 if there is no such trial."""
    state: str | None = await conn.fetchval("SELECT state FROM trials WHERE id = $1", trial_id)
    if state is None:
        raise not_found("trial", trial_id)
    return state

async def fetch_trial(conn: asyncpg.Pool | asyncpg.Connection, trial_id: int) -> JSON | None:
    row = await conn.fetchrow(_TRIAL_SELECT + " WHERE t.id = $1", trial_id)
    return trial_json(row) if row else None


# Determined's trial sort keys (GetExperimentTrials sortBy) and the column each orders by.
TRIAL_SORT_COLUMNS = {
    "SORT_BY_UNSPECIFIED": "t.id",
    "SORT_BY_ID": "t.id",
    "SORT_BY_START_TIME": "t.start_time",
    "SORT_BY_END_TIME": "t.end_time",
    "SORT_BY_STATE": "t.state",
    "SORT_BY_BEST_VALIDATION_METRIC": "t.searcher_metric_value",
    "SORT_BY_LATEST_VALIDATION_METRIC": "t.searcher_metric_value",
    "SORT_BY_BATCHES_PROCESSED": "t.steps_completed",
    "SORT_BY_DURATION": "t.end_time - t.start_time",
    "SORT_BY_RESTARTS": "t.restarts",
    "SORT_BY_CHECKPOINT_SIZE": "t.id",
    "SORT_BY_LOG_RETENTION_DAYS": "t.id",
}


# Trials also sort and filter by a hyperparameter: `hp.optimizer.momentum`.
_HP_FIELD = re.compile(r"hp\.([A-Za-z0-9_-]{1,100}(?:\.[A-Za-z0-9_-]{1,100}){0,9})")


def hp_path(field: str) -> list[str] | None:
    """The hyperparameter `hp.<dotted name>` names, as a path into a trial's hparams; None
    for a field that names none."""
    match = _HP_FIELD.fullmatch(field)
    return match[1].split(".") if match else None


def check_trial_sort(sort_by: str) -> None:
    """A trial sort key the API takes: Determined's, or a hyperparameter's."""
    if hp_path(sort_by) is None:
        require_choice("sortBy", sort_by, TRIAL_SORT_COLUMNS)


# Trials are filtered by conditions `<field><op><value>`: a hyperparameter (`hp.lr<0.01`,
# `hp.optimizer.name=adam`) or one of these columns (`searcherMetric<=0.2`).
TRIAL_FILTER_COLUMNS = {"searcherMetric": "t.searcher_metric_value", "batches": "t.steps_completed",
                        "restarts": "t.restarts", "id": "t.id"}
MAX_TRIAL_FILTERS = 20
_FILTER = re.compile(
    r"\s*(hp\.[A-Za-z0-9_.-]{1,1100}|[A-Za-z]{1,40})\s*(<=|>=|!=|<|>|=)\s*(.{1,200}?)\s*")


@dataclass(frozen=True)
class TrialFilter:
    field: str  # a TRIAL_FILTER_COLUMNS key, or `hp.<dotted name>` with its `path`
    op: str
    value: float | str  # a number compares numerically, text (= and != only) as text
    path: list[str] | None = None


def _bad_filter(text: str, problem: str) -> ApiError:
    return ApiError(400, "bad trial filter", [f"filter: {text!r}: {problem}"])


def _trial_filter(text: str) -> TrialFilter:
    match = _FILTER.fullmatch(text)
    if match is None:
        raise _bad_filter(text, "expected <field><op><value>, e.g. hp.lr<0.01 or "
                                "searcherMetric<=0.2")
    field, op, raw = match.groups()
    path = hp_path(field)
    hparam = path is not None
    if not hparam and field not in TRIAL_FILTER_COLUMNS:
        raise _bad_filter(text, f"{field!r} is not a field: hp.<hyperparameter> or one of "
                                f"{', '.join(TRIAL_FILTER_COLUMNS)}")
    if "\x00" in raw:
        raise _bad_filter(text, "a value cannot hold a NUL character")
    try:
        value = float(raw)
    except ValueError:
        if not hparam:
            raise _bad_filter(text, f"{raw!r} is not a number, and {field} is one") from None
        if op not in ("=", "!="):
            raise _bad_filter(text, f"{raw!r} is not a number, so only = and != compare "
                                    "it") from None
        return TrialFilter(field, op, raw, path)
    if not math.isfinite(value):
        raise _bad_filter(text, f"{raw!r} is not a finite number")
    return TrialFilter(field, op, value, path)


def trial_states(states: list[str] | None) -> list[str] | None:
    """The `states` query (Determined's STATE_ names) as the trials table's states."""
    return [s.removeprefix("STATE_") for s in states] if states else None


def trial_filters(raw: list[str] | None) -> list[TrialFilter]:
    """The `filter` query's conditions, or a 400 naming the one that is not one."""
    if len(raw or []) > MAX_TRIAL_FILTERS:
        raise ApiError(400, "too many trial filters",
                       [f"filter: at most {MAX_TRIAL_FILTERS} conditions"])
    return [_trial_filter(text) for text in raw or []]


def _filter_sql(filters: list[TrialFilter], params: list[Any]) -> str:
    """The conditions as SQL over `t`, their values appended to `params`."""
    clauses = []
    for f in filters:
        if f.path is not None:
            params.append(f.path)
            path = f"${len(params)}::text[]"
            params.append(f.value)
            if isinstance(f.value, float):
                # CASE, not AND: only CASE makes PostgreSQL skip the cast of a non-number.
                clauses.append(f"CASE WHEN jsonb_typeof(t.hparams #> {path}) = 'number' THEN"
                               f" (t.hparams #>> {path})::float8 END {f.op} ${len(params)}::float8")
            else:
                clauses.append(f"(t.hparams #>> {path}) {f.op} ${len(params)}::text")
        else:
            params.append(f.value)
            clauses.append(f"{TRIAL_FILTER_COLUMNS[f.field]}::float8 {f.op} ${len(params)}::float8")
    return "".join(f" AND {c}" for c in clauses)


async def fetch_trial_page(
    conn: asyncpg.Pool | asyncpg.Connection,
    experiment_id: int,
    *,
    states: list[str] | None = None,
    filters: list[TrialFilter] | None = None,
    sort_by: str = "SORT_BY_ID",
    order_desc: bool = False,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[JSON], int]:
    """One page of an experiment's trials and how many match: filtered, ordered and cut in SQL
    (nulls last either way, ties by id), so that only the page's rows read their validations.
    `sort_by` is one of TRIAL_SORT_COLUMNS or `hp.<dotted hyperparameter name>`."""
    params: list[Any] = [experiment_id, states]
    where = (" WHERE t.experiment_id = $1 AND ($2::text[] IS NULL OR t.state = ANY($2))"
             + _filter_sql(filters or [], params))
    total = await conn.fetchval("SELECT count(*) FROM trials t" + where, *params)
    direction = "DESC" if order_desc else "ASC"
    column = TRIAL_SORT_COLUMNS.get(sort_by)
    if (sort_path := hp_path(sort_by)) is not None:
        params.append(sort_path)
        column = f"t.hparams #> ${len(params)}::text[]"
    order = f" ORDER BY {column} {direction} NULLS LAST, t.id {direction}"
    params += [limit, offset]
    rows = await conn.fetch(
        "WITH page AS (SELECT t.id FROM trials t" + where + order
        + f" LIMIT ${len(params) - 1} OFFSET ${len(params)}) "
        + _TRIAL_SELECT + " WHERE t.id IN (SELECT id FROM page)" + order, *params)
    return [trial_json(r) for r in rows], total


async def fetch_trials_by_id(
    conn: asyncpg.Pool | asyncpg.Connection, trial_ids: list[int]
) -> list[JSON]:
    rows = await conn.fetch(_TRIAL_SELECT + " WHERE t.id = ANY($1::int[])", trial_ids)
    return [trial_json(r) for r in rows]


# Ended experiments know their best trial (finish_experiment); running ones take the trial
# whose best validation ranks first. `{detail}` is the experiment's own page's extra: its trial
# ids and notes, which a list leaves out (as Determined's does: an experiment of 10,000 trials
# would send them all).
_EXPERIMENT_SELECT = """
SELECT e.id, e.name, e.description, e.labels, e.config, e.original_config, e.state,
       e.owner, e.archived, best_id.id AS best_trial_id,
       e.start_time, e.end_time, e.project_id, e.parent_id, p.name AS project_name,
       p.workspace_id, w.name AS workspace_name, tr.num_trials, ts.trial_states,
       best.searcher_metric_value AS best_validation,
       -- The trials' progress against the searcher's plan: it only grows, and keeps its value
       -- when the experiment is canceled (a COMPLETED trial counts whole).
       CASE WHEN e.state = 'COMPLETED' THEN 1.0
            ELSE least(1.0, tr.trial_units / greatest(coalesce(e.planned_trials, 0),
                                                      tr.num_trials, 1)) END AS progress
       {detail}
FROM experiments e
JOIN projects p ON p.id = e.project_id JOIN workspaces w ON w.id = p.workspace_id
CROSS JOIN LATERAL (
    SELECT count(*)::int AS num_trials,
           coalesce(sum(CASE WHEN t.state = 'COMPLETED' THEN 1 ELSE least(t.progress, 1) END),
                    0) AS trial_units
    FROM trials t WHERE t.experiment_id = e.id) tr
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(s.state, s.n), '{{}}') AS trial_states
    FROM (SELECT t.state, count(*) AS n FROM trials t WHERE t.experiment_id = e.id
          GROUP BY t.state) s) ts
CROSS JOIN LATERAL (SELECT coalesce(e.best_trial_id, best_trial(e.id)) AS id) best_id
LEFT JOIN trials best ON best.id = best_id.id
"""
_EXPERIMENT_DETAIL = _EXPERIMENT_SELECT.format(detail=""",
       e.notes, (SELECT coalesce(array_agg(t.id ORDER BY t.id), '{}') FROM trials t
                 WHERE t.experiment_id = e.id) AS trial_ids""")
_EXPERIMENT_LIST = _EXPERIMENT_SELECT.format(
    detail=", CASE WHEN e.notes = '' THEN '' ELSE 'omitted' END AS notes")


REDACTED = "********"
_SECRET_LINE = re.compile(r"(?m)^(\s*secret_key\s*:\s*)\S.*$")


def shown_config(config: JSON) -> JSON:
    """An experiment config as the API shows it: S3 `secret_key` hidden (a user's storage keys
    are theirs alone; trials get the stored config, not this)."""
    storage = config.get("checkpoint_storage")
    if not isinstance(storage, dict) or not storage.get("secret_key"):
        return config
    return {**config, "checkpoint_storage": {**storage, "secret_key": REDACTED}}


def shown_yaml(text: str | None) -> str | None:
    """The submitted YAML with any `secret_key:` value hidden."""
    return _SECRET_LINE.sub(rf"\g<1>{REDACTED}", text) if text else text


def experiment_json(row: asyncpg.Record) -> JSON:
    config = row["config"]
    searcher = config["searcher"]
    best_id = row["best_trial_id"]
    best_validation = row["best_validation"]
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"] or "",
        "notes": row["notes"],
        "labels": list(row["labels"]),
        "state": state_name(row["state"]),
        "searcherType": searcher["name"],
        "searcherMetric": searcher["metric"],
        "smallerIsBetter": searcher.get("smaller_is_better", True),
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "progress": float(row["progress"]),
        "numTrials": row["num_trials"],
        **({"trialIds": list(ids)} if (ids := row.get("trial_ids")) is not None else {}),
        # Epochal's: how many trials are in each state (a summary that stays short at 10,000).
        "trialStates": {state_name(k): v for k, v in sorted(row["trial_states"].items())},
        "bestTrialId": best_id,
        "bestValidation": best_validation,
        "archived": row["archived"],
        "username": row["owner"],
        "resourcePool": config["resources"]["resource_pool"],
        "displayName": row["owner"],
        "config": shown_config(config),
        "originalConfig": shown_yaml(row["original_config"]),
        "hyperparameters": config.get("hyperparameters") or {},
        "jobId": job_id(row["id"]),
        "projectId": row["project_id"],
        "projectOwnerId": 1,
        "projectName": row["project_name"],
        "workspaceId": row["workspace_id"],
        "workspaceName": row["workspace_name"],
        "forkedFrom": row["parent_id"],
        "bestTrialSearcherMetric": best_validation,
        "duration": _duration_ms(row["start_time"], row["end_time"]),
        "parentArchived": False,
        "unmanaged": False,
    }


def unsaved_experiment_json(config: JSON, original_config: str, owner: str) -> JSON:
    """The experiment a validate-only create describes: id 0, nothing stored."""
    return {
        "id": 0,
        "name": config["name"],
        "description": config.get("description") or "",
        "labels": config.get("labels") or [],
        "state": state_name("PAUSED"),
        "searcherType": config["searcher"]["name"],
        "startTime": rfc3339(datetime.now(UTC)),
        "numTrials": 0,
        "archived": False,
        "username": owner,
        "config": shown_config(config),
        "originalConfig": shown_yaml(original_config),
        "jobId": "",
        "projectId": DEFAULT_PROJECT_ID,
        "projectOwnerId": 1,
    }


def _duration_ms(start: datetime, end: datetime | None) -> int | None:
    seconds = _seconds_between(start, end)
    return None if seconds is None else int(seconds * 1000)


async def fetch_experiment_row(
    conn: asyncpg.Pool | asyncpg.Connection, experiment_id: int
) -> asyncpg.Record | None:
    return await conn.fetchrow(
        _EXPERIMENT_DETAIL + " WHERE e.id = $1", experiment_id)


@dataclass(frozen=True)
class ExperimentFilter:
    """Determined's GetExperiments filters; None means "any"."""

    states: list[str] | None = None  # without the STATE_ prefix
    archived: bool | None = None
    name: str | None = None  # case-insensitive substring
    description: str | None = None
    labels: list[str] | None = None  # all of them
    users: list[str] | None = None
    user_ids: list[int] | None = None
    project_id: int | None = None


# Determined's sortBy values and the column each orders by (ties broken by id).
EXPERIMENT_SORT_COLUMNS = {
    "SORT_BY_UNSPECIFIED": "e.id",
    "SORT_BY_ID": "e.id",
    "SORT_BY_DESCRIPTION": "e.description",
    "SORT_BY_START_TIME": "e.start_time",
    "SORT_BY_END_TIME": "e.end_time",
    "SORT_BY_STATE": "e.state",
    "SORT_BY_NUM_TRIALS": "tr.num_trials",
    "SORT_BY_PROGRESS": "progress",
    "SORT_BY_USER": "e.owner",
    "SORT_BY_NAME": "e.name",
    "SORT_BY_FORKED_FROM": "e.parent_id",
    "SORT_BY_RESOURCE_POOL": "e.config -> 'resources' ->> 'resource_pool'",
    "SORT_BY_PROJECT_ID": "e.project_id",
    "SORT_BY_CHECKPOINT_SIZE": "e.id",
    "SORT_BY_CHECKPOINT_COUNT": "e.id",
    "SORT_BY_SEARCHER_METRIC_VAL": "best.value",
}

_EXPERIMENT_WHERE = """
 WHERE ($1::text[] IS NULL OR e.state = ANY($1))
   AND ($2::boolean IS NULL OR e.archived = $2)
   AND ($3::text IS NULL OR strpos(lower(e.name), lower($3)) > 0)
   AND ($4::text IS NULL OR strpos(lower(coalesce(e.description, '')), lower($4)) > 0)
   AND ($5::text[] IS NULL OR e.labels @> $5)
   AND ($6::text[] IS NULL OR e.owner = ANY($6))
   AND ($7::int[] IS NULL OR e.owner IN (SELECT username FROM users WHERE id = ANY($7)))
   AND ($8::int IS NULL OR e.project_id = $8)
"""


async def fetch_experiment_rows(
    conn: asyncpg.Pool | asyncpg.Connection,
    *,
    where: ExperimentFilter,
    sort_by: str = "SORT_BY_ID",
    order_desc: bool,
    limit: int,
    offset: int,
) -> tuple[list[asyncpg.Record], int]:
    args = (where.states, where.archived, where.name, where.description, where.labels,
            where.users, where.user_ids, where.project_id)
    direction = "DESC" if order_desc else "ASC"
    column = EXPERIMENT_SORT_COLUMNS[sort_by]
    rows = await conn.fetch(
        _EXPERIMENT_LIST
        + _EXPERIMENT_WHERE
        + f" ORDER BY {column} {direction} NULLS LAST, e.id {direction}"
        + " LIMIT $9 OFFSET $10",
        *args,
        limit,
        offset,
    )
    total = await conn.fetchval("SELECT count(*) FROM experiments e" + _EXPERIMENT_WHERE, *args)
    return list(rows), total


def pagination(offset: int, limit: int, shown: int, total: int) -> JSON:
    """Determined's v1Pagination: its client pages on `endIndex` and `total`."""
    return {"offset": offset, "limit": limit, "startIndex": offset,
            "endIndex": offset + shown, "total": total}


def checkpoint_json(row: asyncpg.Record, searcher_metric: str | None = None) -> JSON:
    validation = row.get("validation", None)
    return {
        "uuid": row["uuid"],
        "taskId": row["task_id"],
        "allocationId": row["allocation_id"],
        "reportTime": rfc3339(row["report_time"]),
        "resources": row["resources"] or {},
        # Determined's checkpoints always carry their step here; `det model` tables read it.
        "metadata": {"steps_completed": row["steps_completed"], **(row["metadata"] or {})},
        "state": state_name(row["state"]),
        "storagePath": row["storage_path"],
        "training": {
            "trialId": row["trial_id"],
            "experimentId": row["experiment_id"],
            "experimentConfig": shown_config(row["experiment_config"])
            if row.get("experiment_config", None) else None,
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
       m.metrics AS validation, e.config -> 'searcher' ->> 'metric' AS searcher_metric,
       e.config AS experiment_config
FROM checkpoints c JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id
LEFT JOIN metrics m ON m.trial_id = c.trial_id AND m.metric_group = 'validation'
  AND m.steps_completed = c.steps_completed
"""


LOG_LEVELS = frozenset(
    {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "UNSPECIFIED"}
)


def log_level(stored: str | None) -> str:
    """Determined's v1LogLevel name for a stored level ("INFO", "LOG_LEVEL_INFO", "warn")."""
    name = (stored or "INFO").upper().removeprefix("LOG_LEVEL_")
    name = {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(name, name)
    return f"LOG_LEVEL_{name if name in LOG_LEVELS else 'INFO'}"


def log_json(row: asyncpg.Record) -> JSON:
    """A trial log line: Epochal's fields and Determined's v1TrialLogsResponse (`message` is
    the line as `det trial logs` prints it)."""
    timestamp = rfc3339(row["timestamp"])
    return {
        "id": row["id"],
        "trialId": row["trial_id"],
        "taskId": row["task_id"],
        "agentId": row["agent_id"],
        "timestamp": timestamp,
        "level": log_level(row["level"]),
        "stdtype": row["stdtype"],
        "log": row["log"],
        "source": "master" if row["stdtype"] is None else "agent",
        "message": f"[{timestamp}] || {row['log']}"
        + ("" if row["log"].endswith("\n") else "\n"),
    }


WORKLOAD_FILTERS = {
    "FILTER_OPTION_UNSPECIFIED": ("training", "validation", "checkpoint"),
    "FILTER_OPTION_CHECKPOINT": ("checkpoint",),
    "FILTER_OPTION_VALIDATION": ("validation",),
    "FILTER_OPTION_CHECKPOINT_OR_VALIDATION": ("validation", "checkpoint"),
}
_WORKLOAD_ORDER = {"training": 0, "validation": 1, "checkpoint": 2}


async def fetch_workloads(
    conn: asyncpg.Pool | asyncpg.Connection, trial_id: int, kinds: tuple[str, ...]
) -> list[JSON]:
    """A trial's reports as Determined's WorkloadContainers (`det trial describe`): one per
    metrics row (training or validation; other groups are not workloads) and per checkpoint,
    ordered by step."""
    out: list[tuple[int, int, JSON]] = []
    groups = [k for k in kinds if k in ("training", "validation")]
    if groups:
        for row in await conn.fetch(
            "SELECT * FROM metrics WHERE trial_id = $1 AND metric_group = ANY($2)"
            " ORDER BY steps_completed",
            trial_id,
            groups,
        ):
            workload = {
                "totalBatches": row["steps_completed"],
                "endTime": rfc3339(row["report_time"]),
                "numInputs": 0,
                "metrics": {"avgMetrics": row["metrics"]},
            }
            kind = row["metric_group"]
            out.append((row["steps_completed"], _WORKLOAD_ORDER[kind], {kind: workload}))
    if "checkpoint" in kinds:
        for row in await conn.fetch(
            "SELECT uuid::text AS uuid, steps_completed, report_time, state, metadata, resources"
            " FROM checkpoints WHERE trial_id = $1 ORDER BY steps_completed",
            trial_id,
        ):
            workload = {
                "uuid": row["uuid"],
                "totalBatches": row["steps_completed"],
                "endTime": rfc3339(row["report_time"]),
                "state": state_name(row["state"]),
                "metadata": row["metadata"] or {},
                "resources": row["resources"] or {},
            }
            out.append((row["steps_completed"], 2, {"checkpoint": workload}))
    out.sort(key=lambda w: (w[0], w[1]))
    return [w for _, _, w in out]


_SUMMARY_GROUPS = {"training": "avg_metrics", "validation": "validation_metrics"}


async def fetch_summary_metrics(conn: asyncpg.Pool | asyncpg.Connection, trial_id: int) -> JSON:
    """Determined's trial summaryMetrics: per group (`avg_metrics` for training,
    `validation_metrics`, other groups by name) and numeric metric, count/sum/min/max/last."""
    rows = await conn.fetch(
        "SELECT m.metric_group, kv.key, count(*) AS count, sum((kv.value)::float8) AS sum,"
        " min((kv.value)::float8) AS min, max((kv.value)::float8) AS max,"
        " (array_agg((kv.value)::float8 ORDER BY m.steps_completed DESC))[1] AS last"
        " FROM metrics m, jsonb_each(m.metrics) kv"
        " WHERE m.trial_id = $1 AND jsonb_typeof(kv.value) = 'number'"
        " GROUP BY m.metric_group, kv.key ORDER BY m.metric_group, kv.key",
        trial_id,
    )
    summary: JSON = {}
    for row in rows:
        group = summary.setdefault(_SUMMARY_GROUPS.get(row["metric_group"], row["metric_group"]),
                                   {})
        group[row["key"]] = {"count": row["count"], "sum": row["sum"], "min": row["min"],
                             "max": row["max"], "last": row["last"], "type": "number"}
    return summary


def sorted_page(
    items: list[dict[str, Any]], key: str, desc: bool, offset: int, limit: int
) -> list[dict[str, Any]]:
    """Nulls last either way, ties by id (as PostgreSQL would order the rows)."""
    present = [i for i in items if i.get(key) is not None]
    missing = [i for i in items if i.get(key) is None]
    present.sort(key=lambda i: (i[key], i.get("id") or i.get("uuid")), reverse=desc)
    ordered = present + missing
    return ordered[offset:offset + limit] if limit else ordered[offset:]


# Determined's checkpoint sort keys (sortByAttr) and the Checkpoint value each orders by.
CHECKPOINT_SORT_KEYS = {
    "SORT_BY_UNSPECIFIED": "reportTime",
    "SORT_BY_UUID": "uuid",
    "SORT_BY_TRIAL_ID": "trialId",
    "SORT_BY_BATCH_NUMBER": "stepsCompleted",
    "SORT_BY_END_TIME": "reportTime",
    "SORT_BY_STATE": "state",
    "SORT_BY_SEARCHER_METRIC": "searcherMetric",
}


def checkpoint_page(
    checkpoints: list[JSON], config: JSON, *, states: list[str] | None, sort_by_attr: str,
    sort_by_metric: str | None, order_by: str, offset: int, limit: int,
) -> JSON:
    """Determined's checkpoint listing answer (an experiment's or a trial's). Sorting by the
    searcher metric puts the best first unless order_by says otherwise."""
    if states:
        wanted = {s if s.startswith("STATE_") else f"STATE_{s}" for s in states}
        checkpoints = [c for c in checkpoints if c["state"] in wanted]
    searcher = config.get("searcher") or {}
    metric = sort_by_metric or searcher.get("metric") or ""
    keyed = [
        {**c, "_key": _checkpoint_sort_value(c, CHECKPOINT_SORT_KEYS[sort_by_attr], metric)}
        for c in checkpoints
    ]
    if sort_by_metric or sort_by_attr == "SORT_BY_SEARCHER_METRIC":
        desc = order_by == "ORDER_BY_DESC" or (
            order_by == "ORDER_BY_UNSPECIFIED" and not searcher.get("smaller_is_better", True))
    else:
        desc = order_by == "ORDER_BY_DESC"
    page = [
        {k: v for k, v in c.items() if k != "_key"}
        for c in sorted_page(keyed, "_key", desc, offset, limit)
    ]
    return {
        "checkpoints": page,
        "pagination": pagination(offset, limit or len(keyed), len(page), len(keyed)),
    }


def _checkpoint_sort_value(checkpoint: dict[str, Any], key: str, metric: str) -> Any:
    if key == "trialId":
        return checkpoint["training"]["trialId"]
    if key == "stepsCompleted":
        return checkpoint["metadata"].get("steps_completed")
    if key == "searcherMetric":
        validation = (checkpoint["training"]["validationMetrics"] or {}).get("avgMetrics") or {}
        value = validation.get(metric)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    return checkpoint[key]

"""The answers' JSON, built from the query layer's records (Determined's field names, camelCase),
and the parsing of the list routes' query parameters.

Every route that shows an experiment, trial, checkpoint or log line builds it here, so the CLI,
the dashboard and Determined's client all see the same shape. The SQL is in `api/queries/`.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import Query

from api.errors import ApiError, not_found, require_choice
from api.queries import metrics, trials
from common.expconf.redaction import redacted, redacted_text
from common.states import ExperimentState
from common.temporal_names import experiment_workflow_id, trial_workflow_id
from services.pools import job_id
from services.workspaces import DEFAULT_PROJECT_ID

JSON = dict[str, Any]
# Query parameters of Determined's list routes.
OrderBy = Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"]
ListQuery = Annotated[list[str] | None, Query()]

def state_name(state: str) -> str:
    return f"STATE_{state}"


def rfc3339(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None:
        return None
    return ((end or datetime.now(UTC)) - start).total_seconds()


def _metric_value(values: JSON | None, name: str) -> float | None:
    if not values:
        return None
    value = values.get(name)
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
        # Epochal's: the trial's workflow in Temporal (the dashboard links it in Temporal's UI);
        # an imported trial had none here.
        "workflowId": (None if row.get("imported")
                       else trial_workflow_id(row["experiment_id"], row["id"])),
    }



MAX_LOGS_PER_REQUEST = 10_000  # lines one request ships (the agents', a detached script's)


def trial_of_task(task_id: str, where: str) -> int:
    """Trial tasks are named `<experimentId>.<trialId>` (allocations add `.<runId>`)."""
    parts = task_id.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ApiError(400, f"{where}: {task_id!r} is not a trial task id (expected EXP.TRIAL)")
    return int(parts[1])


async def require_trial(conn: asyncpg.Pool | asyncpg.Connection, trial_id: int) -> str:
    """The trial's state (without the STATE_ prefix); 404 if there is no such trial."""
    state = await trials.fetch_trial_state(conn, trial_id)
    if state is None:
        raise not_found("trial", trial_id)
    return state


def check_trial_sort(sort_by: str) -> None:
    """A trial sort key the API takes: Determined's, or a hyperparameter's."""
    if trials.hp_path(sort_by) is None:
        require_choice("sortBy", sort_by, trials.TRIAL_SORT_COLUMNS)


MAX_TRIAL_FILTERS = 20
_FILTER = re.compile(
    r"\s*(hp\.[A-Za-z0-9_.-]{1,1100}|[A-Za-z]{1,40})\s*(<=|>=|!=|<|>|=)\s*(.{1,200}?)\s*")


def _bad_filter(text: str, problem: str) -> ApiError:
    return ApiError(400, "bad trial filter", [f"filter: {text!r}: {problem}"])


def _trial_filter(text: str) -> trials.TrialFilter:
    match = _FILTER.fullmatch(text)
    if match is None:
        raise _bad_filter(text, "expected <field><op><value>, e.g. hp.lr<0.01 or "
                                "searcherMetric<=0.2")
    field, op, raw = match.groups()
    path = trials.hp_path(field)
    hparam = path is not None
    if not hparam and field not in trials.TRIAL_FILTER_COLUMNS:
        raise _bad_filter(text, f"{field!r} is not a field: hp.<hyperparameter> or one of "
                                f"{', '.join(trials.TRIAL_FILTER_COLUMNS)}")
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
        return trials.TrialFilter(field, op, raw, path)
    if not math.isfinite(value):
        raise _bad_filter(text, f"{raw!r} is not a finite number")
    return trials.TrialFilter(field, op, value, path)


def trial_states(states: list[str] | None) -> list[str] | None:
    """The `states` query (Determined's STATE_ names) as the trials table's states."""
    return [s.removeprefix("STATE_") for s in states] if states else None


def trial_filters(raw: list[str] | None) -> list[trials.TrialFilter]:
    """The `filter` query's conditions, or a 400 naming the one that is not one."""
    if len(raw or []) > MAX_TRIAL_FILTERS:
        raise ApiError(400, "too many trial filters",
                       [f"filter: at most {MAX_TRIAL_FILTERS} conditions"])
    return [_trial_filter(text) for text in raw or []]


def shown_config(config: JSON) -> JSON:
    """An experiment config as the API shows it, secrets hidden (common/expconf/redaction.py);
    trials get the stored config, not this."""
    shown: JSON = redacted(config)
    return shown


def shown_yaml(text: str | None) -> str | None:
    """The submitted config text, secrets hidden."""
    return redacted_text(text)


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
        # Epochal's: why it ended in ERROR when its trials do not say (its sampler failed).
        "errorMessage": row["error"],
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
        # A script outside the cluster runs it (Determined's core_v2): no workflow does.
        "unmanaged": row["unmanaged"],
        # Epochal's: imported from another cluster's history; no workflow ran it here either.
        "importedFrom": imported_from(row),
        "workflowId": (None if row["unmanaged"] or row["import_url"] is not None
                       else experiment_workflow_id(row["id"])),
    }


def imported_from(row: asyncpg.Record) -> JSON | None:
    """Where an imported experiment came from: the source cluster's kind and address, and
    the experiment's id there (None for one made here)."""
    if row["import_url"] is None:
        return None
    return {"kind": row["import_kind"], "url": row["import_url"],
            "experimentId": row["import_external_id"]}


def unsaved_experiment_json(config: JSON, original_config: str, owner: str) -> JSON:
    """The experiment a validate-only create describes: id 0, nothing stored."""
    return {
        "id": 0,
        "name": config["name"],
        "description": config.get("description") or "",
        "labels": config.get("labels") or [],
        "state": state_name(ExperimentState.PAUSED),
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
        for row in await metrics.fetch_trial_metrics(conn, trial_id, groups):
            workload = {
                "totalBatches": row["steps_completed"],
                "endTime": rfc3339(row["report_time"]),
                "numInputs": 0,
                "metrics": {"avgMetrics": row["metrics"]},
            }
            kind = row["metric_group"]
            out.append((row["steps_completed"], _WORKLOAD_ORDER[kind], {kind: workload}))
    if "checkpoint" in kinds:
        for row in await metrics.fetch_checkpoint_workloads(conn, trial_id):
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
    rows = await metrics.fetch_metric_summaries(conn, trial_id)
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


def user_json(row: asyncpg.Record) -> JSON:
    """Determined's v1User (with the agent user a run of theirs is, if linked)."""
    return {
        "id": row["id"],
        "username": row["username"],
        "displayName": row["display_name"] or "",
        "admin": row["admin"],
        "active": row["active"],
        "modifiedAt": rfc3339(row["modified_at"]),
        "agentUserGroup": None if row["agent_uid"] is None else {
            "agentUid": row["agent_uid"], "agentGid": row["agent_gid"],
            "agentUser": row["agent_user"], "agentGroup": row["agent_group"]},
    }

"""Trials: a trial's row with its latest and best validation and latest checkpoint, pages of an
experiment's trials (filtered, sorted and cut in SQL), and the columns trials sort and filter by."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from api.queries import Conn
from common.states import CheckpointState

_TRIAL_SELECT = f"""
SELECT t.*, e.config -> 'searcher' AS searcher,
       e.import_source_id IS NOT NULL AS imported,  -- no workflow ran it here
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
    SELECT uuid FROM checkpoints c
    WHERE c.trial_id = t.id AND c.state = '{CheckpointState.COMPLETED}'
    ORDER BY c.steps_completed DESC, c.report_time DESC LIMIT 1) lc ON true
"""


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



# Trials are filtered by conditions `<field><op><value>`: a hyperparameter (`hp.lr<0.01`,
# `hp.optimizer.name=adam`) or one of these columns (`searcherMetric<=0.2`).
TRIAL_FILTER_COLUMNS = {"searcherMetric": "t.searcher_metric_value", "batches": "t.steps_completed",
                        "restarts": "t.restarts", "id": "t.id"}


@dataclass(frozen=True)
class TrialFilter:
    field: str  # a TRIAL_FILTER_COLUMNS key, or `hp.<dotted name>` with its `path`
    op: str
    value: float | str  # a number compares numerically, text (= and != only) as text
    path: list[str] | None = None



async def fetch_trial_state(conn: Conn, trial_id: int) -> str | None:
    state: str | None = await conn.fetchval("SELECT state FROM trials WHERE id = $1", trial_id)
    return state


async def fetch_trial_row(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(_TRIAL_SELECT + " WHERE t.id = $1", trial_id)


async def fetch_trial_rows(conn: Conn, trial_ids: list[int]) -> list[asyncpg.Record]:
    return list(await conn.fetch(_TRIAL_SELECT + " WHERE t.id = ANY($1::int[])", trial_ids))


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



async def fetch_existing_trial_ids(conn: Conn, trial_ids: list[int]) -> set[int]:
    """Which of the ids are trials (a stream's 404 comes before its first line)."""
    rows = await conn.fetch("SELECT id FROM trials WHERE id = ANY($1::int[])", trial_ids)
    return {r["id"] for r in rows}


async def fetch_trial_page(
    conn: Conn,
    experiment_id: int,
    *,
    states: list[str] | None = None,
    filters: list[TrialFilter] | None = None,
    sort_by: str = "SORT_BY_ID",
    order_desc: bool = False,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[asyncpg.Record], int]:
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
    return list(rows), total


async def fetch_trial_experiment_and_state(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT experiment_id, state FROM trials WHERE id = $1", trial_id)


async def fetch_experiment_config_of_trial(conn: Conn, trial_id: int) -> dict[str, Any] | None:
    config: dict[str, Any] | None = await conn.fetchval(
        "SELECT e.config FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.id = $1",
        trial_id,
    )
    return config


async def raise_steps_completed(conn: Conn, trial_id: int, steps: int) -> None:
    await conn.execute(
        "UPDATE trials SET steps_completed = GREATEST(steps_completed, $2)"
        " WHERE id = $1",
        trial_id,
        steps,
    )


async def refresh_best_validation(conn: Conn, trial_ids: list[int]) -> None:
    await conn.execute("SELECT refresh_best_validation($1::int[])", trial_ids)


async def update_trial_progress(conn: Conn, trial_id: int, progress: float) -> None:
    await conn.execute("UPDATE trials SET progress = $2 WHERE id = $1", trial_id, progress)


async def update_early_exit_reason(conn: Conn, trial_id: int, reason: str) -> None:
    await conn.execute(
        "UPDATE trials SET early_exit_reason = $2 WHERE id = $1", trial_id, reason
    )


async def fetch_trial_run(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    """The trial's experiment, current run, the agent it runs on, and whether it was asked to
    stop."""
    return await conn.fetchrow(
        "SELECT experiment_id, run_id, agent_id, preempt_requested FROM trials WHERE id = $1",
        trial_id)


async def fetch_trial_owner_account(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    """The trial's state and its owner's account (id, username), for a session of theirs."""
    return await conn.fetchrow(
        "SELECT t.state, u.id AS user_id, u.username FROM trials t"
        " JOIN experiments e ON e.id = t.experiment_id JOIN users u ON u.username = e.owner"
        " WHERE t.id = $1", trial_id)

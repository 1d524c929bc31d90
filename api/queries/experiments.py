"""Experiments: one experiment's row (with its trial counts, progress and best trial), pages of
them under Determined's filters and sort keys, their changes, their model definitions, and what
is read of all of an experiment's trials or checkpoints at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from api.queries import Conn

# Ended experiments know their best trial (finish_experiment); running ones take the trial
# whose best validation ranks first. `{detail}` is the experiment's own page's extra: its trial
# ids and notes, which a list leaves out (as Determined's does: an experiment of 10,000 trials
# would send them all).
_EXPERIMENT_SELECT = """
SELECT e.id, e.name, e.description, e.labels, e.config, e.original_config, e.state,
       e.owner, e.archived, e.error, e.unmanaged, best_id.id AS best_trial_id,
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


async def fetch_experiment_row(conn: Conn, experiment_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(_EXPERIMENT_DETAIL + " WHERE e.id = $1", experiment_id)


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
    conn: Conn,
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



async def fetch_experiment_state(conn: Conn, experiment_id: int) -> str | None:
    state: str | None = await conn.fetchval(
        "SELECT state FROM experiments WHERE id = $1", experiment_id)
    return state


async def fetch_experiment_config(conn: Conn, experiment_id: int) -> dict[str, Any] | None:
    config: dict[str, Any] | None = await conn.fetchval(
        "SELECT config FROM experiments WHERE id = $1", experiment_id)
    return config


async def fetch_experiment_seed(conn: Conn, experiment_id: int) -> int | None:
    seed: int | None = await conn.fetchval(
        "SELECT seed FROM experiments WHERE id = $1", experiment_id)
    return seed


async def lock_experiment_config(conn: Conn, experiment_id: int) -> asyncpg.Record | None:
    """The experiment's config and state, its row locked until the caller's transaction ends."""
    return await conn.fetchrow(
        "SELECT config, state FROM experiments WHERE id = $1 FOR UPDATE", experiment_id)


async def insert_experiment(
    conn: Conn, *, name: str, description: str | None, labels: list[str], config: dict[str, Any],
    original_config: str, seed: int, owner: str | None, project_id: int, parent_id: int | None,
    planned_trials: int | None,
) -> int:
    """The new experiment's id."""
    experiment_id: int = await conn.fetchval(
        "INSERT INTO experiments (name, description, labels, config, original_config, seed,"
        " owner, project_id, parent_id, planned_trials)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        name,
        description,
        labels,
        config,
        original_config,
        seed,
        owner,
        project_id,
        parent_id,
        planned_trials,
    )
    return experiment_id


async def update_experiment(
    conn: Conn, experiment_id: int, *, name: str | None, description: str | None,
    labels: list[str] | None, notes: str | None,
) -> None:
    """Change the fields given (None keeps one as it is)."""
    await conn.execute(
        "UPDATE experiments SET name = coalesce($2, name),"
        " description = coalesce($3, description), labels = coalesce($4, labels),"
        " notes = coalesce($5, notes) WHERE id = $1",
        experiment_id,
        name,
        description,
        labels,
        notes,
    )


async def update_experiment_config(conn: Conn, experiment_id: int, config: dict[str, Any]) -> None:
    await conn.execute("UPDATE experiments SET config = $2 WHERE id = $1", experiment_id, config)


async def reopen_experiment(
    conn: Conn, experiment_id: int, trial_id: int, config: dict[str, Any]
) -> None:
    """An ended experiment and its one trial running again (continued), under `config`."""
    await conn.execute(
        "UPDATE experiments SET config = $2, state = 'ACTIVE', end_time = NULL WHERE id = $1",
        experiment_id, config)
    await conn.execute(
        "UPDATE trials SET state = 'QUEUED', end_time = NULL, restarts = 0 WHERE id = $1",
        trial_id)


async def move_experiment(conn: Conn, experiment_id: int, project_id: int) -> None:
    await conn.execute("UPDATE experiments SET project_id = $2 WHERE id = $1", experiment_id,
                       project_id)


async def set_experiment_archived(conn: Conn, experiment_id: int, archived: bool) -> None:
    await conn.execute("UPDATE experiments SET archived = $2 WHERE id = $1", experiment_id,
                       archived)


async def delete_experiment(conn: Conn, experiment_id: int) -> None:
    """Delete the experiment; its trials, metrics, logs and checkpoints go with it (cascade)."""
    await conn.execute("DELETE FROM experiments WHERE id = $1", experiment_id)


async def fetch_checkpoint_paths(conn: Conn, experiment_id: int) -> list[str]:
    """Where the experiment's checkpoints that are not deleted yet keep their files."""
    rows = await conn.fetch(
        "SELECT c.storage_path FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
        " WHERE t.experiment_id = $1 AND c.state <> 'DELETED'",
        experiment_id,
    )
    return [row["storage_path"] for row in rows]


async def fetch_scored_trials_stamp(conn: Conn, experiment_id: int) -> tuple[Any, ...]:
    """How many of the experiment's trials have a searcher metric, the newest one's id and the
    metrics' sum: any new or changed metric changes it."""
    return tuple(await conn.fetchrow(
        "SELECT count(*), max(id), sum(searcher_metric_value) FROM trials"
        " WHERE experiment_id = $1 AND searcher_metric_value IS NOT NULL", experiment_id))


async def fetch_scored_trials(conn: Conn, experiment_id: int, limit: int) -> list[asyncpg.Record]:
    """The hyperparameters and searcher metric of the experiment's latest `limit` trials that
    have one."""
    return list(await conn.fetch(
        "SELECT hparams, searcher_metric_value FROM trials WHERE experiment_id = $1"
        " AND searcher_metric_value IS NOT NULL ORDER BY id DESC LIMIT $2",
        experiment_id, limit))


async def insert_model_definition(conn: Conn, experiment_id: int, tgz: bytes, size: int) -> None:
    await conn.execute(
        "INSERT INTO model_definitions (experiment_id, tgz, size_bytes) VALUES ($1, $2, $3)",
        experiment_id,
        tgz,
        size,
    )


async def fetch_model_definition(conn: Conn, experiment_id: int) -> bytes | None:
    """The experiment's model definition, a .tar.gz."""
    tgz: bytes | None = await conn.fetchval(
        "SELECT tgz FROM model_definitions WHERE experiment_id = $1", experiment_id)
    return tgz


async def fetch_best_searcher_metric(conn: Conn, experiment_id: int) -> float | None:
    """The searcher metric's best validation value over the experiment's trials (best_trial)."""
    value: float | None = await conn.fetchval(
        "SELECT searcher_metric_value FROM trials WHERE id = best_trial($1)", experiment_id)
    return value


async def set_log_retention(conn: Conn, experiment_id: int, days: int) -> bool:
    """The experiment's log retention, for its trials now and later; False: no experiment."""
    found = await conn.fetchval(
        "UPDATE experiments SET log_retention_days = $2 WHERE id = $1 RETURNING id",
        experiment_id, days)
    if found is None:
        return False
    await conn.execute(
        "UPDATE trials SET log_retention_days = $2 WHERE experiment_id = $1", experiment_id, days)
    return True

"""Experiments: one experiment's row (with its trial counts, progress and best trial), pages of
them under Determined's filters and sort keys, their changes, their model definitions, and what
is read of all of an experiment's trials or checkpoints at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from api.queries import Conn
from common.states import CheckpointState, ExperimentState, TrialState

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
       -- Imported from another cluster (services/history_import/): where from.
       src.kind AS import_kind, src.url AS import_url, e.import_external_id,
       -- The trials' progress against the searcher's plan: it only grows, and keeps its value
       -- when the experiment is canceled (a COMPLETED trial counts whole).
       CASE WHEN e.state = '{experiment_completed}' THEN 1.0
            ELSE least(1.0, tr.trial_units / greatest(coalesce(e.planned_trials, 0),
                                                      tr.num_trials, 1)) END AS progress
       {detail}
FROM experiments e
JOIN projects p ON p.id = e.project_id JOIN workspaces w ON w.id = p.workspace_id
LEFT JOIN import_sources src ON src.id = e.import_source_id
CROSS JOIN LATERAL (
    SELECT count(*)::int AS num_trials,
           coalesce(sum(CASE WHEN t.state = '{trial_completed}' THEN 1
                             ELSE least(t.progress, 1) END), 0) AS trial_units
    FROM trials t WHERE t.experiment_id = e.id) tr
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(s.state, s.n), '{{}}') AS trial_states
    FROM (SELECT t.state, count(*) AS n FROM trials t WHERE t.experiment_id = e.id
          GROUP BY t.state) s) ts
CROSS JOIN LATERAL (SELECT coalesce(e.best_trial_id, best_trial(e.id)) AS id) best_id
LEFT JOIN trials best ON best.id = best_id.id
"""
_COMPLETED = {"experiment_completed": ExperimentState.COMPLETED,
              "trial_completed": TrialState.COMPLETED}
_EXPERIMENT_DETAIL = _EXPERIMENT_SELECT.format(**_COMPLETED, detail=""",
       e.notes, (SELECT coalesce(array_agg(t.id ORDER BY t.id), '{}') FROM trials t
                 WHERE t.experiment_id = e.id) AS trial_ids""")
_EXPERIMENT_LIST = _EXPERIMENT_SELECT.format(
    **_COMPLETED, detail=", CASE WHEN e.notes = '' THEN '' ELSE 'omitted' END AS notes")


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
    # Epochal's: words that must all appear in the id, name, description or owner.
    search: str | None = None


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
    "SORT_BY_SEARCHER_METRIC_VAL": "best.searcher_metric_value",
    # Epochal's, for the dashboard's columns.
    "SORT_BY_DURATION": "coalesce(e.end_time, now()) - e.start_time",
    "SORT_BY_PROJECT": "lower(w.name || ' / ' || p.name)",
    "SORT_BY_LABELS": "e.labels",
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
   AND ($9::text IS NULL OR NOT EXISTS (
        SELECT 1 FROM regexp_split_to_table(lower($9), '\\s+') word
        WHERE word <> '' AND strpos(lower(e.id || ' ' || e.name || ' '
            || coalesce(e.description, '') || ' ' || e.owner), word) = 0))
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
            where.users, where.user_ids, where.project_id, where.search)
    direction = "DESC" if order_desc else "ASC"
    column = EXPERIMENT_SORT_COLUMNS[sort_by]
    rows = await conn.fetch(
        _EXPERIMENT_LIST
        + _EXPERIMENT_WHERE
        + f" ORDER BY {column} {direction} NULLS LAST, e.id {direction}"
        + " LIMIT $10 OFFSET $11",
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
        f" WHERE t.experiment_id = $1 AND c.state <> '{CheckpointState.DELETED}'",
        experiment_id,
    )
    return [row["storage_path"] for row in rows]


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

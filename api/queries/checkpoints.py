"""Checkpoints: their rows with the trial, experiment config and validation at their step, and
what the harness records of them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from api.queries import Conn
from common.states import CheckpointState

_CHECKPOINT_SELECT = """
SELECT c.uuid::text AS uuid, c.task_id, c.allocation_id, c.report_time, c.resources, c.metadata,
       c.state, c.storage_path, c.trial_id, c.steps_completed, t.experiment_id, t.hparams,
       m.metrics AS validation, e.config -> 'searcher' ->> 'metric' AS searcher_metric,
       e.config AS experiment_config
FROM checkpoints c JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id
LEFT JOIN metrics m ON m.trial_id = c.trial_id AND m.metric_group = 'validation'
  AND m.steps_completed = c.steps_completed
"""



async def fetch_checkpoint(conn: Conn, checkpoint_uuid: uuid.UUID | str) -> asyncpg.Record | None:
    return await conn.fetchrow(_CHECKPOINT_SELECT + " WHERE c.uuid = $1", checkpoint_uuid)


async def fetch_checkpoints(conn: Conn, uuids: list[Any]) -> list[asyncpg.Record]:
    return list(await conn.fetch(_CHECKPOINT_SELECT + " WHERE c.uuid = ANY($1::uuid[])", uuids))


async def fetch_experiment_checkpoints(conn: Conn, experiment_id: int) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        _CHECKPOINT_SELECT + " WHERE t.experiment_id = $1 ORDER BY c.report_time", experiment_id))


async def fetch_trial_checkpoints(conn: Conn, trial_id: int) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        _CHECKPOINT_SELECT + " WHERE c.trial_id = $1 ORDER BY c.steps_completed", trial_id))


async def upsert_checkpoint(
    conn: Conn,
    checkpoint_uuid: str,
    trial_id: int,
    task_id: str,
    allocation_id: str,
    steps_completed: int,
    metadata: dict[str, Any],
    resources: dict[str, int],
    storage_path: str,
    state: str,
    report_time: datetime | None,
) -> None:
    """A retried report updates its checkpoint's metadata, resources and state; a uuid another
    trial recorded is left alone."""
    await conn.execute(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, steps_completed,"
        " metadata, resources, storage_path, state, report_time)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, now()))"
        " ON CONFLICT (uuid) DO UPDATE SET metadata = EXCLUDED.metadata,"
        "   resources = EXCLUDED.resources, state = EXCLUDED.state"
        " WHERE checkpoints.trial_id = EXCLUDED.trial_id",
        checkpoint_uuid,
        trial_id,
        task_id,
        allocation_id,
        steps_completed,
        metadata,
        resources,
        storage_path,
        state,
        report_time,
    )


async def fetch_checkpoint_trial_ids(conn: Conn, uuids: list[uuid.UUID]) -> list[asyncpg.Record]:
    """(uuid, trial_id) of those of the checkpoints that exist."""
    return list(await conn.fetch(
        "SELECT uuid, trial_id FROM checkpoints WHERE uuid = ANY($1::uuid[])", uuids
    ))


async def update_checkpoint_resources(
    conn: Conn, checkpoint_uuid: uuid.UUID, resources: dict[str, int], deleted: bool
) -> None:
    await conn.execute(
        "UPDATE checkpoints SET resources = $2,"
        f" state = CASE WHEN $3 THEN '{CheckpointState.DELETED}' ELSE state END WHERE uuid = $1",
        checkpoint_uuid,
        resources,
        deleted,
    )


async def checkpoint_exists(conn: Conn, checkpoint_uuid: uuid.UUID) -> bool:
    return await conn.fetchval(
        "SELECT 1 FROM checkpoints WHERE uuid = $1", checkpoint_uuid) is not None


async def fetch_checkpoint_storage(conn: Conn, checkpoint_uuid: uuid.UUID) -> asyncpg.Record | None:
    """Where a checkpoint's files are: its trial, path, state and its experiment's config."""
    return await conn.fetchrow(
        "SELECT c.trial_id, c.storage_path, c.state, e.config FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id"
        " WHERE c.uuid = $1", checkpoint_uuid)


async def fetch_checkpoint_experiments(conn: Conn, uuids: list[uuid.UUID]) -> list[asyncpg.Record]:
    """(uuid, experiment_id, config) of those of the checkpoints that exist."""
    return list(await conn.fetch(
        "SELECT c.uuid::text AS uuid, t.experiment_id, e.config FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id"
        " WHERE c.uuid = ANY($1::uuid[]) ORDER BY c.uuid", uuids))


async def fetch_registrations(conn: Conn, uuids: list[uuid.UUID]) -> list[asyncpg.Record]:
    """The model versions the checkpoints are registered as: uuid, model name and id, version."""
    return list(await conn.fetch(
        "SELECT v.checkpoint_uuid::text AS uuid, m.name, m.id AS model_id, v.version"
        " FROM model_versions v JOIN models m ON m.id = v.model_id"
        " WHERE v.checkpoint_uuid = ANY($1::uuid[]) ORDER BY v.checkpoint_uuid, m.id, v.version",
        uuids))

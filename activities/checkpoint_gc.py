"""Which checkpoints an experiment keeps, and deleting the rest (checkpoint GC).

Determined's policy: per trial keep the `save_trial_latest` newest and the `save_trial_best` best
(by the searcher metric validated at the checkpoint's step), and across the experiment keep the
`save_experiment_best` best. Everything else is deleted from storage and marked DELETED. It runs
when an experiment ends (`finish_experiment`), when an ended experiment's policy changes (`det
experiment set gc-policy`, previewed first), and on the checkpoints a user names (`det checkpoint
delete`). A checkpoint registered as a model version is never deleted. Rows are marked DELETED
before their files go, so a retry after a crash finishes the job; a recorded path outside the
storage is never deleted (common/checkpoint_storage.py). Also here: the TensorBoard files
Determined's Core API uploads beside an experiment's checkpoints (`det experiment
delete-tb-files`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import posixpath
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from common.checkpoint_storage import (
    CheckpointFiles,
    StorageError,
    UnsafeCheckpointPath,
    checkpoint_dir_inside,
    shared_fs_directory,
)
from common.expconf import RetentionCounts
from common.states import CheckpointState

log = logging.getLogger("epochal.checkpoint_gc")

_DEFAULT_COUNTS = RetentionCounts()


@dataclass(frozen=True)
class StoredCheckpoint:
    uuid: str
    trial_id: int
    steps_completed: int
    metric: float | None  # the searcher metric validated at this checkpoint's step, if any


@dataclass(frozen=True)
class RetentionPolicy:
    """The config's retention counts (their defaults are RetentionCounts') and the metric's
    direction."""

    save_experiment_best: int = _DEFAULT_COUNTS.save_experiment_best
    save_trial_best: int = _DEFAULT_COUNTS.save_trial_best
    save_trial_latest: int = _DEFAULT_COUNTS.save_trial_latest
    smaller_is_better: bool = True


def _best_first(
    checkpoints: list[StoredCheckpoint], smaller_is_better: bool
) -> list[StoredCheckpoint]:
    scored = [c for c in checkpoints if c.metric is not None]
    return sorted(
        scored,
        key=lambda c: (c.metric if smaller_is_better else -c.metric, -c.steps_completed),  # type: ignore[operator]
    )


def checkpoints_to_keep(checkpoints: list[StoredCheckpoint], policy: RetentionPolicy) -> set[str]:
    """The uuids the policy keeps; every other checkpoint may be deleted."""
    keep: set[str] = set()
    by_trial: dict[int, list[StoredCheckpoint]] = {}
    for ckpt in checkpoints:
        by_trial.setdefault(ckpt.trial_id, []).append(ckpt)
    for trial_ckpts in by_trial.values():
        newest = sorted(trial_ckpts, key=lambda c: c.steps_completed, reverse=True)
        keep.update(c.uuid for c in newest[: policy.save_trial_latest])
        best = _best_first(trial_ckpts, policy.smaller_is_better)
        keep.update(c.uuid for c in best[: policy.save_trial_best])
    best_overall = _best_first(checkpoints, policy.smaller_is_better)
    keep.update(c.uuid for c in best_overall[: policy.save_experiment_best])
    return keep



def policy_of(config: Mapping[str, Any], counts: RetentionCounts | None = None
              ) -> RetentionPolicy:
    """The policy of an experiment's config (its checkpoint_storage's counts, or `counts`)."""
    if counts is None:
        storage = config.get("checkpoint_storage") or {}
        counts = RetentionCounts.model_validate(
            {k: v for k, v in storage.items() if k in RetentionCounts.model_fields})
    smaller = bool((config.get("searcher") or {}).get("smaller_is_better", True))
    return RetentionPolicy(**counts.model_dump(), smaller_is_better=smaller)


def searcher_value(metrics: Mapping[str, object] | None, name: str) -> float | None:
    """The searcher metric in a validation's metrics, if it is a number."""
    if not metrics:
        return None
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


_COMPLETED = (
    "SELECT c.uuid::text AS uuid, c.trial_id, c.steps_completed, c.storage_path,"
    "       m.metrics AS validation"
    " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
    " LEFT JOIN metrics m ON m.trial_id = c.trial_id AND m.metric_group = 'validation'"
    "   AND m.steps_completed = c.steps_completed"
    f" WHERE t.experiment_id = $1 AND c.state = '{CheckpointState.COMPLETED}'"
)


async def completed_checkpoints(conn: asyncpg.Pool | asyncpg.Connection,
                                experiment_id: int) -> list[asyncpg.Record]:
    """The experiment's COMPLETED checkpoints with their validation (what GC chooses from)."""
    return list(await conn.fetch(_COMPLETED, experiment_id))


def dropped_by(rows: Sequence[asyncpg.Record], config: Mapping[str, Any],
               policy: RetentionPolicy) -> list[asyncpg.Record]:
    """The rows of checkpoints `policy` does not keep."""
    metric = str((config.get("searcher") or {}).get("metric") or "")
    stored = [StoredCheckpoint(r["uuid"], r["trial_id"], r["steps_completed"],
                               searcher_value(r["validation"], metric)) for r in rows]
    keep = checkpoints_to_keep(stored, policy)
    return [r for r in rows if r["uuid"] not in keep]


def inside_storage(rows: Sequence[asyncpg.Record], files: CheckpointFiles | None) -> list[str]:
    """The uuids of rows whose recorded path lies in the storage (the others are kept, and
    logged): only those may be marked DELETED."""
    found = []
    for row in rows:
        try:
            if files is None:
                raise UnsafeCheckpointPath("the storage cannot be reached")
            files.uuid_and_directory(row["storage_path"])
        except UnsafeCheckpointPath as err:
            log.error("checkpoint %s kept: %s", row["uuid"], err)
            continue
        found.append(row["uuid"])
    return found


async def mark_deleted(conn: asyncpg.Connection, uuids: Sequence[str]) -> list[str]:
    """Mark COMPLETED checkpoints DELETED, except those registered as model versions; the
    uuids marked. Runs in the caller's transaction."""
    # Lock the rows, then look for model versions in a later statement (a fresh snapshot): a
    # registration that locked a row first is seen here, one that comes after finds the
    # checkpoint DELETED (api/routes/models.py, register_version).
    await conn.execute(
        "SELECT 1 FROM checkpoints WHERE uuid = ANY($1::uuid[]) FOR UPDATE", list(uuids))
    rows = await conn.fetch(
        f"UPDATE checkpoints c SET state = '{CheckpointState.DELETED}'"
        f" WHERE uuid = ANY($1::uuid[]) AND state = '{CheckpointState.COMPLETED}' AND NOT EXISTS"
        " (SELECT 1 FROM model_versions v WHERE v.checkpoint_uuid = c.uuid)"
        " RETURNING uuid::text AS uuid", list(uuids))
    return [r["uuid"] for r in rows]


async def delete_marked_files(pool: asyncpg.Pool, experiment_id: int,
                              files: CheckpointFiles) -> None:
    """Delete the files of every checkpoint of the experiment marked DELETED (again: deleting
    what is gone is harmless, and a crash between the mark and the files is finished here)."""
    rows = await pool.fetch(
        "SELECT c.uuid::text AS uuid, c.storage_path FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id"
        f" WHERE t.experiment_id = $1 AND c.state = '{CheckpointState.DELETED}'",
        experiment_id,
    )
    for row in rows:
        try:
            await asyncio.to_thread(files.delete, row["storage_path"])
        except (UnsafeCheckpointPath, StorageError) as err:
            log.error("checkpoint %s files kept: %s", row["uuid"], err)


async def preview_gc(pool: asyncpg.Pool, experiment_id: int, config: Mapping[str, Any],
                     counts: RetentionCounts) -> list[str]:
    """The uuids GC with `counts` would delete now (those registered as model versions stay)."""
    rows = await completed_checkpoints(pool, experiment_id)
    dropped = [r["uuid"] for r in dropped_by(rows, config, policy_of(config, counts))]
    registered = await pool.fetch(
        "SELECT DISTINCT checkpoint_uuid::text AS uuid FROM model_versions"
        " WHERE checkpoint_uuid = ANY($1::uuid[])", dropped)
    kept = {r["uuid"] for r in registered}
    return [uuid for uuid in dropped if uuid not in kept]


async def collect_garbage(pool: asyncpg.Pool, experiment_id: int, config: Mapping[str, Any],
                          files: CheckpointFiles) -> list[str]:
    """GC of an experiment by its config's policy, now; the uuids deleted."""
    rows = await completed_checkpoints(pool, experiment_id)
    candidates = inside_storage(dropped_by(rows, config, policy_of(config)), files)
    async with pool.acquire() as conn, conn.transaction():
        deleted = await mark_deleted(conn, candidates)
    await delete_marked_files(pool, experiment_id, files)
    return deleted


async def delete_checkpoints(pool: asyncpg.Pool, experiment_id: int, uuids: Sequence[str],
                             files: CheckpointFiles) -> list[str]:
    """Delete the named checkpoints of one experiment (rows DELETED, then files); the uuids
    deleted (not those registered meanwhile, nor those not COMPLETED)."""
    rows = await pool.fetch(
        "SELECT uuid::text AS uuid, storage_path FROM checkpoints WHERE uuid = ANY($1::uuid[])",
        list(uuids))
    candidates = inside_storage(rows, files)
    async with pool.acquire() as conn, conn.transaction():
        deleted = await mark_deleted(conn, candidates)
    await delete_marked_files(pool, experiment_id, files)
    return deleted


def tensorboard_path(cluster_id: str, experiment_id: int) -> str:
    """Where Determined's Core API uploads an experiment's TensorBoard files, relative to its
    checkpoint storage (determined/tensorboard/build.py, `get_experiment_sync_path`)."""
    return posixpath.join(cluster_id, "tensorboard", "experiment", str(experiment_id))


def delete_tensorboard_files(files: CheckpointFiles, cluster_id: str, experiment_id: int) -> int:
    """Delete the experiment's TensorBoard files from its storage (blocking); how many were
    deleted (S3: objects; shared_fs: files). Nothing outside the storage is touched."""
    relative = tensorboard_path(cluster_id, experiment_id)
    if files.s3 is not None:
        return files.s3.delete(relative)  # every object under prefix/<relative>/
    root = shared_fs_directory(files.storage)
    if root is None:
        return 0
    try:
        directory = checkpoint_dir_inside(posixpath.join(root, relative),
                                          str(files.storage.get("host_path") or ""))
    except UnsafeCheckpointPath:
        return 0
    if not directory.is_dir():
        return 0
    count = sum(len(names) for _, _, names in os.walk(directory))
    shutil.rmtree(directory)
    return count

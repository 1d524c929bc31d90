"""Checkpoints' files as the API reaches them (common/checkpoint_storage.py) and collects them
(activities/checkpoint_gc.py, which experiments' ends run too): the storage of an experiment's
config, GC by other counts (previewed, or applied to an ended experiment), deleting chosen
checkpoints, an experiment's and its TensorBoard files."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from activities import checkpoint_gc
from common.checkpoint_storage import (
    CheckpointFiles,
    StorageError,
    StorageOutsideRoots,
    UnsafeCheckpointPath,
)
from common.expconf import RetentionCounts
from services.errors import Conflict, Invalid, StorageFailed
from services.settings import StorageSettings


def files_of(config: Mapping[str, Any], settings: StorageSettings) -> CheckpointFiles:
    """The storage of a config's checkpoints, for a request about one of them: storage outside
    the cluster's roots is a Conflict, one the master cannot use the request's mistake."""
    try:
        return CheckpointFiles.of(config, settings.checkpoint_storage,
                                  settings.allowed_storage_roots())
    except StorageOutsideRoots as err:
        raise Conflict(str(err)) from None
    except StorageError as err:
        raise Invalid(str(err)) from None


def experiment_files(config: Mapping[str, Any], settings: StorageSettings,
                     experiment_id: int) -> CheckpointFiles:
    """The storage of an experiment's checkpoints, for a change to all of them: storage outside
    the cluster's roots is a Conflict, one that fails StorageFailed."""
    try:
        return CheckpointFiles.of(config, settings.checkpoint_storage,
                                  settings.allowed_storage_roots())
    except StorageOutsideRoots as err:
        raise Conflict(f"experiment {experiment_id}: {err}") from None
    except StorageError as err:
        raise StorageFailed(f"experiment {experiment_id}: {err}") from None


async def preview_gc(pool: asyncpg.Pool, experiment_id: int, config: Mapping[str, Any],
                     counts: RetentionCounts) -> list[str]:
    """The uuids GC with `counts` would delete now."""
    return await checkpoint_gc.preview_gc(pool, experiment_id, config, counts)


async def collect_garbage(pool: asyncpg.Pool, experiment_id: int, config: dict[str, Any],
                          settings: StorageSettings) -> None:
    """An ended experiment's checkpoints collected by its config's counts now."""
    files = experiment_files(config, settings, experiment_id)
    await checkpoint_gc.collect_garbage(pool, experiment_id, config, files)


async def delete_checkpoints(pool: asyncpg.Pool, settings: StorageSettings,
                             by_experiment: Mapping[int, list[str]],
                             configs: Mapping[int, Mapping[str, Any]]) -> None:
    """Each experiment's named checkpoints: their files, then they are DELETED, as GC does."""
    for experiment_id, named in sorted(by_experiment.items()):
        files = files_of(configs[experiment_id], settings)
        await checkpoint_gc.delete_checkpoints(pool, experiment_id, named, files)


async def delete_tensorboard_files(config: Mapping[str, Any], settings: StorageSettings,
                                   cluster_id: str, experiment_id: int) -> None:
    """The TensorBoard files Determined's Core API uploaded beside the experiment's
    checkpoints."""
    files = experiment_files(config, settings, experiment_id)
    try:
        await asyncio.to_thread(checkpoint_gc.delete_tensorboard_files, files, cluster_id,
                                experiment_id)
    except StorageError as err:
        raise StorageFailed(f"experiment {experiment_id}: {err}") from None


async def delete_experiment_files(config: Mapping[str, Any], settings: StorageSettings,
                                  experiment_id: int, paths: Sequence[str]) -> None:
    """A deleted experiment's checkpoints' files (only inside its storage); a detached run's,
    outside the roots, are its script's host's to keep. Storage that fails keeps them all."""
    try:
        files = CheckpointFiles.of(config, settings.checkpoint_storage,
                                   settings.allowed_storage_roots())
        await asyncio.to_thread(_delete_checkpoints, files, paths)
    except StorageOutsideRoots:
        pass
    except StorageError as err:
        raise StorageFailed(f"experiment {experiment_id} is kept: {err}") from None


def _delete_checkpoints(files: CheckpointFiles, paths: Sequence[str]) -> None:
    for path in paths:
        try:
            files.delete(path)
        except UnsafeCheckpointPath:
            continue  # a path outside the storage is never deleted; its row goes anyway

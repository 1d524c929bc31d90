"""Checkpoints in shared_fs storage: ``core.checkpoint``.

A checkpoint is a directory ``host_path/<uuid>/``; the harness writes ``metadata.json`` into it
and, on the cluster, registers it with ``POST /api/v1/checkpoints`` once the user's files are
written. Off-cluster the same code stores into a local directory and only logs.

In a trial of several processes the chief stores checkpoints alone, or, with ``shard=True``,
every rank writes its part into the same directory and the chief reports the whole.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import numbers
import os
import pathlib
import shutil
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from harness.core._distributed import DistributedContext, single
from harness.core._info import TrialInfo
from harness.core._session import Session

logger = logging.getLogger("harness.core")

METADATA_FILE = "metadata.json"


class CheckpointContext:
    """Stores and restores checkpoint directories. Use it as ``core.checkpoint``."""

    def __init__(self, info: TrialInfo, session: Session | None, *,
                 distributed: DistributedContext | None = None) -> None:
        storage = info.checkpoint_storage
        if storage.get("type", "shared_fs") != "shared_fs":
            raise ValueError(
                f"checkpoint_storage.type {storage.get('type')!r} is not supported by this "
                "harness: only shared_fs"
            )
        host_path = storage.get("host_path")
        if not isinstance(host_path, str) or not host_path:
            raise ValueError("checkpoint_storage.host_path must be a non-empty path")
        self._info = info
        self._session = session
        self._distributed = distributed or single()
        # Determined's optional `storage_path` is a directory under host_path (as the API records).
        self.base_path = pathlib.Path(host_path) / str(storage.get("storage_path") or "")
        self._closed = False

    @contextlib.contextmanager
    def store_path(
        self, metadata: Mapping[str, Any], *, shard: bool = False
    ) -> Iterator[tuple[pathlib.Path, str]]:
        """Yield ``(path, storage_id)`` of a new empty directory to write a checkpoint into.

        ``metadata`` must hold ``steps_completed`` (an int >= 0): the master resumes trials from
        it. When the block ends the checkpoint is listed and reported; if the block raises, the
        directory is removed and nothing is reported.

        In a trial of several processes only the chief calls it, unless ``shard=True``: then
        every rank calls it at the same point, all get the same directory to write their own
        files into, and the chief reports the checkpoint once every rank's block has ended.
        """
        self._check_open("store_path")
        meta = _check_metadata(metadata)
        distributed = self._distributed.size > 1
        if distributed and shard:
            yield from self._store_sharded(meta)
            return
        if distributed and not self._distributed.is_chief:
            raise RuntimeError(
                f"store_path() called on rank {self._distributed.rank}: in a trial of several "
                "processes only the chief (rank 0) stores checkpoints, unless every rank "
                "calls store_path(metadata, shard=True)")
        storage_id = str(uuid.uuid4())
        path = self.base_path / storage_id
        path.mkdir(parents=True, exist_ok=False)
        try:
            yield path, storage_id
            if not path.is_dir():
                raise RuntimeError(f"checkpoint directory {path} was removed inside store_path()")
            (path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        resources = _list_files(path)
        if self._session is None:
            logger.info(
                "stored checkpoint %s at step %d in %s (%d files, %d bytes)",
                storage_id, meta["steps_completed"], path, len(resources),
                sum(resources.values()),
            )
            return
        self._report(storage_id, path, resources, meta)

    def _store_sharded(self, meta: dict[str, Any]) -> Iterator[tuple[pathlib.Path, str]]:
        """store_path(shard=True): the chief names the directory, every rank writes into it."""
        dist = self._distributed
        storage_id: str = dist.broadcast(str(uuid.uuid4()) if dist.is_chief else None)
        path = self.base_path / storage_id
        path.mkdir(parents=True, exist_ok=True)
        failed: str | None = None
        try:
            yield path, storage_id
        except BaseException as err:
            failed = f"rank {dist.rank}: {err!r}"
            raise
        finally:
            failures = [f for f in dist.allgather(failed) if f is not None]
            if failures and dist.is_chief:
                shutil.rmtree(path, ignore_errors=True)
        if failures:
            raise RuntimeError(f"checkpoint {storage_id} was not stored: {'; '.join(failures)}")
        if not dist.is_chief:
            return
        (path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        resources = _list_files(path)
        if self._session is None:
            logger.info("stored sharded checkpoint %s at step %d in %s (%d files)",
                        storage_id, meta["steps_completed"], path, len(resources))
            return
        self._report(storage_id, path, resources, meta)

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[pathlib.Path]:
        """Yield the directory of checkpoint ``storage_id``, e.g. core.info.latest_checkpoint."""
        self._check_open("restore_path")
        if not isinstance(storage_id, str) or not storage_id:
            raise TypeError(f"storage_id must be a non-empty string, got {storage_id!r}")
        if storage_id in (".", "..") or "/" in storage_id or os.sep in storage_id:
            raise ValueError(f"storage_id must be a checkpoint uuid, not a path: {storage_id!r}")
        path = self.base_path / storage_id
        if not path.is_dir():
            raise FileNotFoundError(
                f"checkpoint {storage_id} not found: {path} is not a directory (is "
                "checkpoint_storage.host_path shared with this machine, and was the checkpoint "
                "deleted by the master's garbage collection?)"
            )
        yield path

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata stored with checkpoint ``storage_id`` (including ``steps_completed``)."""
        with self.restore_path(storage_id) as path:
            try:
                data = json.loads((path / METADATA_FILE).read_text())
            except FileNotFoundError:
                return {}
        return data if isinstance(data, dict) else {}

    def _report(
        self, storage_id: str, path: pathlib.Path, resources: dict[str, int], meta: dict[str, Any]
    ) -> None:
        assert self._session is not None
        info = self._info
        body = {
            "uuid": storage_id,
            "taskId": info.task_id,
            "allocationId": info.allocation_id,
            "reportTime": datetime.datetime.now(datetime.UTC).isoformat(),
            "resources": resources,
            "metadata": meta,
            "state": "STATE_COMPLETED",
            "training": {
                "trialId": info.trial_id,
                "experimentId": info.experiment_id,
                "hparams": info.hparams,
                "validationMetrics": None,
                "searcherMetric": None,
            },
            "storagePath": str(path),
        }
        # Waits for a master that is away (the report is what lets the trial resume from it);
        # the files stay if the master refuses it.
        self._session.deliver("/api/v1/checkpoints", body=body,
                              what=f"checkpoint {storage_id}")
        logger.info("reported checkpoint %s at step %d", storage_id, meta["steps_completed"])

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"checkpoint.{what}() called after the core context was closed")

    def _close(self) -> None:
        self._closed = True


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise TypeError(
            "store_path(metadata): metadata must be a dict that includes 'steps_completed', "
            f"got {type(metadata).__name__}"
        )
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 0:
        raise ValueError(
            "store_path(metadata): metadata must include 'steps_completed', an int >= 0 "
            f"(the master resumes trials from it); got {steps!r}"
        )
    if not all(isinstance(k, str) for k in metadata):
        raise TypeError("store_path(metadata): metadata keys must be strings")
    meta = {**metadata, "steps_completed": int(steps)}
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"store_path(metadata): metadata must be JSON-serializable: {e}") from e
    return meta


def _list_files(root: pathlib.Path) -> dict[str, int]:
    resources: dict[str, int] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = pathlib.Path(dirpath) / name
            resources[full.relative_to(root).as_posix()] = full.stat().st_size
    return dict(sorted(resources.items()))

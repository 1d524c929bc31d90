"""Checkpoints: ``core.checkpoint``.

A checkpoint is a directory ``<uuid>/``; the harness writes ``metadata.json`` into it and, on the
cluster, registers it with ``POST /api/v1/checkpoints`` once the user's files are stored. With
shared_fs storage the directory is ``host_path/<uuid>/`` itself; with S3 it is written in this
agent's checkpoint cache and uploaded when the block ends (``_s3.py``), and a restore downloads
into that cache unless the checkpoint is there already. Off-cluster the same code stores into a
local directory and only logs.

In a trial of several processes the chief stores checkpoints alone, or, with ``shard=True``,
every rank writes its part (into the same directory on shared_fs; on S3 each uploads its own
files) and the chief reports the whole.
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
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from harness.core._distributed import DistributedContext, single
from harness.core._info import TrialInfo
from harness.core._s3 import Transfer
from harness.core._session import Session

logger = logging.getLogger("harness.core")

METADATA_FILE = "metadata.json"
# Where the agent keeps S3 checkpoints for this run's trial (agent_worker/trial_info.py).
CACHE_ENV = "EPOCHAL_CHECKPOINT_CACHE"
CACHE_KEEP = 2  # checkpoints a trial keeps in its cache: the newest it stored or restored


class CheckpointContext:
    """Stores and restores checkpoint directories. Use it as ``core.checkpoint``."""

    def __init__(self, info: TrialInfo, session: Session | None, *,
                 distributed: DistributedContext | None = None,
                 before_report: Callable[[], None] | None = None) -> None:
        storage = info.checkpoint_storage
        self._info = info
        self._session = session
        # Stores the training metrics reported so far (core.train's queue): a checkpoint the
        # master knows of before them would let a run killed just after it resume past steps
        # whose metrics were never stored.
        self._before_report = before_report
        self._distributed = distributed or single()
        self._closed = False
        self._transfer: Transfer | None = None
        self._own_session: Session | None = None
        kind = storage.get("type", "shared_fs")
        if kind == "shared_fs":
            host_path = storage.get("host_path")
            if not isinstance(host_path, str) or not host_path:
                raise ValueError("checkpoint_storage.host_path must be a non-empty path")
            # Determined's optional `storage_path` is a directory under host_path (as the API
            # records).
            self.base_path = pathlib.Path(host_path) / str(storage.get("storage_path") or "")
        elif kind == "s3":
            if not info.on_cluster or info.master_url is None:
                raise ValueError("checkpoint_storage.type 's3' needs the master (it presigns "
                                 "the uploads): off-cluster, use shared_fs")
            if session is None:  # a rank other than the chief still moves its own files
                session = self._own_session = Session(info.master_url,
                                                      token=info.session_token)
            cache = os.environ.get(CACHE_ENV)
            self.base_path = pathlib.Path(cache) if cache else pathlib.Path(
                tempfile.gettempdir(), "epochal-checkpoint-cache", f"trial-{info.trial_id}")
            self._transfer = Transfer(session, info.task_id, storage)
        else:
            raise ValueError(f"checkpoint_storage.type {kind!r} is not supported by this "
                             "harness: use shared_fs or s3")

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
        path = self._writing_dir(storage_id)
        path.mkdir(parents=True, exist_ok=False)
        try:
            yield path, storage_id
            if not path.is_dir():
                raise RuntimeError(f"checkpoint directory {path} was removed inside store_path()")
            (path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            resources = _list_files(path)
            if self._transfer is not None:
                self._transfer.upload(storage_id, path, resources)
                path = self._cached(path, storage_id)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        if self._session is None:
            logger.info(
                "stored checkpoint %s at step %d in %s (%d files, %d bytes)",
                storage_id, meta["steps_completed"], path, len(resources),
                sum(resources.values()),
            )
            return
        self._report(storage_id, path, resources, meta)

    def _store_sharded(self, meta: dict[str, Any]) -> Iterator[tuple[pathlib.Path, str]]:
        """store_path(shard=True): the chief names the checkpoint, every rank writes into it
        (on S3, into a directory of its own whose files it uploads)."""
        dist = self._distributed
        storage_id: str = dist.broadcast(str(uuid.uuid4()) if dist.is_chief else None)
        path = self._writing_dir(storage_id, rank=dist.rank)
        path.mkdir(parents=True, exist_ok=True)
        failed: str | None = None
        uploaded: dict[str, int] = {}
        try:
            yield path, storage_id
            if self._transfer is not None:
                uploaded = _list_files(path)
                self._transfer.upload(storage_id, path, uploaded)
        except BaseException as err:
            failed = f"rank {dist.rank}: {err!r}"
            raise
        finally:
            failures = [f for f in dist.allgather(failed) if f is not None]
            if failures and (dist.is_chief or self._transfer is not None):
                shutil.rmtree(path, ignore_errors=True)
        if failures:
            raise RuntimeError(f"checkpoint {storage_id} was not stored: {'; '.join(failures)}")
        shards = dist.allgather(uploaded) if self._transfer is not None else []
        if not dist.is_chief:
            if self._transfer is not None:
                shutil.rmtree(path, ignore_errors=True)
            return
        (path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if self._transfer is not None:
            try:
                self._transfer.upload(storage_id, path, {METADATA_FILE: (path / METADATA_FILE)
                                                         .stat().st_size})
            finally:
                shutil.rmtree(path, ignore_errors=True)  # the cache holds whole checkpoints only
            resources = dict(sorted(
                {name: size for shard in shards for name, size in shard.items()}.items()))
            resources[METADATA_FILE] = len(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        else:
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
        if (storage_id in (".", "..") or "/" in storage_id or os.sep in storage_id
                or storage_id.startswith(".")):
            raise ValueError(f"storage_id must be a checkpoint uuid, not a path: {storage_id!r}")
        path = self.base_path / storage_id
        if self._transfer is not None and not path.is_dir():
            self._download(storage_id)
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
        if self._before_report is not None:
            self._before_report()
        # Waits for a master that is away (the report is what lets the trial resume from it);
        # the files stay if the master refuses it.
        self._session.deliver("/api/v1/checkpoints", body=body,
                              what=f"checkpoint {storage_id}")
        logger.info("reported checkpoint %s at step %d", storage_id, meta["steps_completed"])

    def _writing_dir(self, storage_id: str, rank: int | None = None) -> pathlib.Path:
        """Where a new checkpoint is written: in place on shared_fs, else beside the cache."""
        if self._transfer is None:
            return self.base_path / storage_id
        return self.base_path / f".{storage_id}.writing{'' if rank is None else f'.{rank}'}"

    def _cached(self, written: pathlib.Path, storage_id: str) -> pathlib.Path:
        """Keep an uploaded checkpoint in the cache, for a restore on this agent."""
        path = self.base_path / storage_id
        os.replace(written, path)
        self._prune_cache(keep=path)
        return path

    def _download(self, storage_id: str) -> None:
        assert self._transfer is not None
        self.base_path.mkdir(parents=True, exist_ok=True)
        partial = pathlib.Path(tempfile.mkdtemp(prefix=f".{storage_id}.", dir=self.base_path))
        try:
            self._transfer.download(storage_id, partial)
            path = self.base_path / storage_id
            try:
                os.rename(partial, path)
            except OSError:  # another rank of this trial on this agent was first
                if not path.is_dir():
                    raise
            self._prune_cache(keep=path)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def _prune_cache(self, keep: pathlib.Path) -> None:
        """Leave the trial's CACHE_KEEP newest checkpoints in the cache (``keep`` among them)."""
        keep.touch()
        entries = sorted((p for p in self.base_path.iterdir()
                          if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[CACHE_KEEP:]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"checkpoint.{what}() called after the core context was closed")

    def _close(self) -> None:
        self._closed = True
        if self._transfer is not None:
            self._transfer.close()
        if self._own_session is not None:
            self._own_session.close()


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

"""Model definitions: fetched from the master once per experiment, extracted per run.

The master keeps each experiment's code as a .tar.gz (`GET /experiments/{id}/model_def`); the
agent caches it in ``WORK_DIR/model_defs/<experiment_id>.tgz`` (it never changes) and extracts
it into every run's fresh working directory.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import logging
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import httpx
from temporalio.exceptions import ApplicationError

logger = logging.getLogger(__name__)

FETCH_ATTEMPTS = 4


class ModelDefinitionError(ApplicationError):
    """The model definition cannot be had or used; retrying the run will not help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, type="ModelDefinitionError", non_retryable=True)


class ModelDefinitions:
    """Fetches, caches and safely extracts experiments' model definitions."""

    def __init__(self, http: httpx.AsyncClient, master_url: str, work_dir: Path) -> None:
        self._http = http
        self._master_url = master_url.rstrip("/")
        self._cache_dir = work_dir / "model_defs"
        self._locks: dict[int, asyncio.Lock] = {}

    def cache_path(self, experiment_id: int) -> Path:
        return self._cache_dir / f"{experiment_id}.tgz"

    async def extract_to(self, experiment_id: int, dest: Path) -> None:
        """Put experiment `experiment_id`'s files into `dest` (which must exist)."""
        tgz = await self.fetch(experiment_id)
        try:
            await asyncio.to_thread(safe_extract, tgz, dest)
        except ModelDefinitionError:
            # Let a retry download it again in case the cached copy is what is wrong.
            tgz.unlink(missing_ok=True)
            raise

    async def fetch(self, experiment_id: int) -> Path:
        """The cached tarball, downloaded first if needed."""
        path = self.cache_path(experiment_id)
        lock = self._locks.setdefault(experiment_id, asyncio.Lock())
        async with lock:
            if path.exists():
                return path
            data = await self._download(experiment_id)
            await asyncio.to_thread(_write_atomically, path, data)
            logger.info("cached the model definition of experiment %s (%d bytes)",
                        experiment_id, len(data))
            return path

    async def _download(self, experiment_id: int) -> bytes:
        url = f"{self._master_url}/api/v1/experiments/{experiment_id}/model_def"
        last = ""
        for attempt in range(FETCH_ATTEMPTS):
            if attempt:
                await asyncio.sleep(min(0.5 * 2**attempt, 4.0))
            try:
                resp = await self._http.get(url, timeout=60.0)
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code == 404:
                raise ModelDefinitionError(
                    f"experiment {experiment_id} has no model definition on the master "
                    f"(GET {url}: 404)")
            if resp.status_code != 200:
                raise ModelDefinitionError(
                    f"cannot fetch the model definition of experiment {experiment_id}: "
                    f"GET {url}: HTTP {resp.status_code}: {resp.text[:200]}")
            try:
                b64 = resp.json()["b64Tgz"]
                return base64.b64decode(b64, validate=True)
            except (ValueError, KeyError, TypeError, binascii.Error) as err:
                raise ModelDefinitionError(
                    f"the master sent a malformed model definition for experiment "
                    f"{experiment_id}: expected {{\"b64Tgz\": <base64>}} ({err})") from err
        # The master is away or failing: a retryable error, the workflow decides what next.
        raise ApplicationError(
            f"cannot reach the master for the model definition of experiment {experiment_id} "
            f"after {FETCH_ATTEMPTS} attempts: {last}", type="MasterUnavailable")


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse absolute paths and `..` outright (the data filter would only strip a leading /)."""
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts:
        raise ModelDefinitionError(
            f"model definition has an unsafe path {member.name!r}: paths must be relative "
            "and must not contain '..'")


def safe_extract(tgz: Path, dest: Path) -> None:
    """Extract `tgz` into `dest`; links and special files that escape `dest` are refused too."""
    try:
        with tarfile.open(tgz, mode="r:*") as tar:
            members = tar.getmembers()
            for member in members:
                check_member(member)
            tar.extractall(dest, members=members, filter="data")
    except ModelDefinitionError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        # A broken archive. Other OSErrors (a full disk) are the agent's and stay retryable.
        raise ModelDefinitionError(f"cannot extract the model definition: {err}") from err

"""Where a checkpoint's files are, and the master's access to them: shared_fs or S3.

The master (API and activities) lists, reads, deletes and hands out access to checkpoint files
here; trials never hold the cluster's S3 credentials: the harness uploads and downloads S3
checkpoints through presigned URLs the master gives it for one checkpoint at a time
(docs/ARCHITECTURE.md, "Checkpoint storage").

Layouts, as Determined names them: shared_fs `host_path[/storage_path]/<uuid>/<file>`, S3
`s3://bucket/[prefix/]<uuid>/<file>`.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

import urllib3
from minio import Minio
from minio.datatypes import Part
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error

# A file above this size goes up in parts of this size, several at once.
PART_SIZE = 32 * 1024 * 1024
MAX_PARTS = 10_000  # S3's limit
# Presigned URLs live long enough for a large checkpoint on a slow link, and no longer.
URL_LIFETIME = timedelta(hours=6)
MAX_FILES = 100_000  # files of one checkpoint
# How long the master waits for an S3 endpoint: an unreachable one fails a request, not stalls.
_TIMEOUT = urllib3.Timeout(connect=5.0, read=60.0)
_RETRIES = urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504))


class StorageError(Exception):
    """The storage refused or could not be reached; the message names the bucket and cause."""


class StorageOutsideRoots(StorageError):
    """shared_fs storage outside the directories the master reads and deletes in: a detached
    run's (Determined's core_v2), whose script keeps its files where it runs."""


def under_any_root(directory: str, roots: Sequence[str]) -> bool:
    """Whether `directory` is one of `roots` or lies under one, by their normalised paths (no
    link is followed: a caller that cares resolves them first)."""
    path = posixpath.normpath(directory)
    return any(path == root or path.startswith(root.rstrip("/") + "/")
               for root in map(posixpath.normpath, roots))


class UnsafeCheckpointPath(ValueError):
    """A checkpoint's recorded path does not lie inside its storage: it is never deleted."""


def shared_fs_directory(storage: Mapping[str, Any] | None) -> str | None:
    """The directory shared_fs checkpoints live in: `host_path`, or `host_path/storage_path`
    (None for other storage). The harness, the API and Determined's client all use it."""
    if not storage or storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return None
    host_path = str(storage["host_path"])
    sub = storage.get("storage_path")
    return posixpath.normpath(posixpath.join(host_path, str(sub))) if sub else host_path


def shared_fs_host_path(storage: Mapping[str, Any] | None) -> str | None:
    """shared_fs storage's `host_path` (None for other storage): Determined's containers see it
    at /determined_shared_fs (agent_worker/determined_env.py)."""
    if shared_fs_directory(storage) is None:
        return None
    assert storage is not None
    return str(storage["host_path"])


def storage_path(storage: Mapping[str, Any], uuid: str) -> str:
    """Where checkpoint `uuid` lives: a directory for shared_fs, an `s3://` URL for S3."""
    if storage.get("type") == "s3":
        return S3Location.of(storage).url(uuid)
    return os.path.join(shared_fs_directory(storage) or "", uuid)


# -- shared_fs ------------------------------------------------------------------------------------

def checkpoint_dir_inside(path: str, host_path: str) -> Path:
    """The checkpoint's directory, if it lies strictly inside the storage's `host_path`.

    Paths come from the database (reported by training code), so anything else (empty,
    relative, the storage root itself, outside it, or escaping it through a symlink) is refused.
    """
    if not path or not host_path:
        raise UnsafeCheckpointPath(f"empty path {path!r} or storage root {host_path!r}")
    given, root = Path(path), Path(host_path)
    if not given.is_absolute() or not root.is_absolute():
        raise UnsafeCheckpointPath(f"checkpoint path {path!r} is not absolute")
    resolved, resolved_root = given.resolve(), root.resolve()
    if resolved_root not in resolved.parents:
        raise UnsafeCheckpointPath(f"checkpoint path {path!r} is not inside {host_path!r}")
    return resolved


# -- S3 -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class S3Location:
    """A bucket and prefix on an endpoint (None: AWS)."""

    bucket: str
    prefix: str
    endpoint_url: str | None

    @classmethod
    def of(cls, storage: Mapping[str, Any]) -> S3Location:
        return cls(bucket=str(storage["bucket"]),
                   prefix=str(storage.get("prefix") or "").strip("/"),
                   endpoint_url=storage.get("endpoint_url") or None)

    def key(self, uuid: str, path: str = "") -> str:
        """The object key of file `path` of checkpoint `uuid` (its directory's, with "")."""
        return f"{self.prefix + '/' if self.prefix else ''}{uuid}/{path}"

    def url(self, uuid: str) -> str:
        return f"s3://{self.bucket}/{self.key(uuid).rstrip('/')}"

    def describe(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint_url or 'AWS S3'}"

    def uuid_of(self, path: str) -> str:
        """The checkpoint uuid of a recorded `s3://` path of this location, else refused."""
        prefix = f"s3://{self.bucket}/{self.prefix + '/' if self.prefix else ''}"
        uuid = path.removeprefix(prefix)
        if not path.startswith(prefix) or not uuid or "/" in uuid or uuid in (".", ".."):
            raise UnsafeCheckpointPath(f"checkpoint path {path!r} is not a checkpoint of "
                                       f"s3://{self.bucket}/{self.prefix}")
        return uuid


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str


def s3_credentials(storage: Mapping[str, Any], environment: Mapping[str, Any],
                   cluster_storage: Mapping[str, Any] | None) -> S3Credentials | None:
    """The credentials the master uses for an S3 storage, as a trial on Determined would find
    them: the config's own keys, else the AWS variables of the experiment's environment; a
    storage that is exactly the cluster's default gets the cluster's (which no trial sees).
    The master's own environment is never used: it holds the cluster's secrets."""
    if storage.get("access_key") and storage.get("secret_key"):
        return S3Credentials(str(storage["access_key"]), str(storage["secret_key"]))
    key, secret = environment.get("AWS_ACCESS_KEY_ID"), environment.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return S3Credentials(str(key), str(secret))
    if (cluster_storage and cluster_storage.get("type") == "s3"
            and S3Location.of(storage) == S3Location.of(cluster_storage)
            and cluster_storage.get("access_key") and cluster_storage.get("secret_key")):
        return S3Credentials(str(cluster_storage["access_key"]),
                             str(cluster_storage["secret_key"]))
    return None


def public_storage(storage: Mapping[str, Any]) -> dict[str, Any]:
    """A storage config without its secret keys: what users and trials may see."""
    return {k: v for k, v in storage.items() if k not in ("access_key", "secret_key")}


def _endpoint(endpoint_url: str | None) -> tuple[str, bool]:
    if not endpoint_url:
        return "s3.amazonaws.com", True
    parsed = urllib.parse.urlsplit(endpoint_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path not in ("", "/"):
        raise StorageError(f"checkpoint_storage.endpoint_url: expected http(s)://host[:port], "
                           f"got {endpoint_url!r}")
    return parsed.netloc, parsed.scheme == "https"


_clients: dict[tuple[str | None, str, str], Minio] = {}
_clients_lock = threading.Lock()


def _client(location: S3Location, credentials: S3Credentials) -> Minio:
    """One minio client per endpoint and key (it caches each bucket's region)."""
    key = (location.endpoint_url, credentials.access_key, credentials.secret_key)
    with _clients_lock:
        if key not in _clients:
            if len(_clients) >= 64:
                _clients.pop(next(iter(_clients)))
            host, secure = _endpoint(location.endpoint_url)
            _clients[key] = Minio(
                host, access_key=credentials.access_key, secret_key=credentials.secret_key,
                secure=secure, http_client=urllib3.PoolManager(
                    timeout=_TIMEOUT, retries=_RETRIES, maxsize=16))
        return _clients[key]


def _clean_relpath(path: str) -> str:
    """A file's path inside a checkpoint: relative, no `..`, no empty parts."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path!r} is not a relative file path inside a checkpoint")
    return path


class S3Store:
    """The master's side of one S3 location: presigned access for the harness, listing,
    reading and deleting one checkpoint's objects (and never anything outside `prefix/uuid/`).

    Every method blocks (the API and activities call it in a thread)."""

    def __init__(self, location: S3Location, credentials: S3Credentials) -> None:
        self.location = location
        self._client = _client(location, credentials)

    def _fail(self, doing: str, err: Exception) -> StorageError:
        if isinstance(err, S3Error):
            cause = f"{err.code}: {err.message}"
        elif isinstance(err, urllib3.exceptions.HTTPError):
            cause = f"cannot reach {self.location.endpoint_url or 'AWS S3'} ({err})"
        else:
            cause = str(err)
        return StorageError(f"{doing} in {self.location.describe()} failed: {cause}")

    def upload_plan(self, uuid: str, files: Mapping[str, int]) -> list[dict[str, Any]]:
        """Presigned PUTs for each file of a checkpoint; a large file is a multipart upload whose
        parts go up at once (the harness completes it through `complete_upload`)."""
        if len(files) > MAX_FILES:
            raise ValueError(f"files: at most {MAX_FILES} files in one checkpoint")
        plan: list[dict[str, Any]] = []
        try:
            for path, size in files.items():
                key = self.location.key(uuid, _clean_relpath(path))
                if size <= PART_SIZE:
                    plan.append({"path": path, "url": self._presign("PUT", key)})
                    continue
                count = -(-size // PART_SIZE)
                if count > MAX_PARTS:
                    raise ValueError(f"files[{path!r}]: {size} bytes is more than S3 takes")
                upload_id = self._client._create_multipart_upload(
                    self.location.bucket, key, {"Content-Type": "application/octet-stream"})
                plan.append({"path": path, "uploadId": upload_id, "partSize": PART_SIZE,
                             "parts": [self._presign("PUT", key, {
                                 "partNumber": str(n), "uploadId": upload_id})
                                 for n in range(1, count + 1)]})
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail(f"starting the upload of checkpoint {uuid}", err) from err
        return plan

    def complete_upload(self, uuid: str, path: str, upload_id: str, etags: list[str]) -> None:
        key = self.location.key(uuid, _clean_relpath(path))
        try:
            self._client._complete_multipart_upload(
                self.location.bucket, key, upload_id,
                [Part(n, etag) for n, etag in enumerate(etags, start=1)])
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail(f"completing {path} of checkpoint {uuid}", err) from err

    def download_plan(self, uuid: str) -> list[dict[str, Any]]:
        """Presigned GETs for every file of a checkpoint."""
        return [{"path": path, "size": size,
                 "url": self._presign("GET", self.location.key(uuid, path))}
                for path, size in self.listing(uuid).items()]

    def listing(self, uuid: str) -> dict[str, int]:
        """The checkpoint's files and their sizes, as stored."""
        prefix = self.location.key(uuid)
        try:
            objects = self._client.list_objects(self.location.bucket, prefix=prefix,
                                                recursive=True)
            found = {o.object_name.removeprefix(prefix): int(o.size or 0) for o in objects
                     if o.object_name and not o.is_dir}
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail(f"listing checkpoint {uuid}", err) from err
        if len(found) > MAX_FILES:
            raise StorageError(f"checkpoint {uuid} has more than {MAX_FILES} files")
        return dict(sorted(found.items()))

    def read(self, uuid: str, path: str) -> Iterator[bytes]:
        """One file's bytes, streamed."""
        key = self.location.key(uuid, _clean_relpath(path))
        try:
            answer = self._client.get_object(self.location.bucket, key)
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail(f"reading {path} of checkpoint {uuid}", err) from err
        try:
            yield from answer.stream(1024 * 1024)
        finally:
            answer.close()
            answer.release_conn()

    def delete(self, uuid: str) -> int:
        """Delete every object under the checkpoint's `prefix/uuid/`; how many there were."""
        keys = [self.location.key(uuid, path) for path in self.listing(uuid)]
        try:
            errors = list(self._client.remove_objects(
                self.location.bucket, (DeleteObject(k) for k in keys)))
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail(f"deleting checkpoint {uuid}", err) from err
        if errors:
            raise StorageError(f"deleting checkpoint {uuid} in {self.location.describe()} "
                               f"failed: {errors[0].code}: {errors[0].message}")
        return len(keys)

    def check_bucket(self, *, create: bool = False) -> bool:
        """Raise a StorageError naming the cause when the bucket cannot be used; with `create`,
        make it if it is missing. True if it was made."""
        try:
            if self._client.bucket_exists(self.location.bucket):
                return False
            if not create:
                raise StorageError(f"{self.location.describe()} does not exist")
            self._client.make_bucket(self.location.bucket)
            return True
        except (MinioException, urllib3.exceptions.HTTPError) as err:
            raise self._fail("checking the bucket", err) from err

    def _presign(self, method: str, key: str,
                 query: dict[str, str | list[str] | tuple[str]] | None = None) -> str:
        return self._client.get_presigned_url(method, self.location.bucket, key,
                                              expires=URL_LIFETIME, extra_query_params=query)


# -- either storage -------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointFiles:
    """The files of checkpoints of one experiment's storage, as the master reaches them."""

    storage: Mapping[str, Any]
    s3: S3Store | None

    @classmethod
    def of(cls, config: Mapping[str, Any], cluster_storage: Mapping[str, Any] | None,
           roots: Sequence[str] | None = None) -> CheckpointFiles:
        """Raises StorageError when an S3 storage has no credentials the master may use, and
        (StorageOutsideRoots) when shared_fs storage lies outside `roots`, where given."""
        storage = config.get("checkpoint_storage") or {}
        directory = shared_fs_directory(storage)
        if roots is not None and directory is not None and not under_any_root(directory, roots):
            raise StorageOutsideRoots(
                f"the checkpoint storage {directory} is outside the directories this master "
                f"reads and deletes in ({', '.join(roots)}): its files stay where the detached "
                "script that wrote them keeps them")
        if storage.get("type") != "s3":
            return cls(storage, None)
        environment = (config.get("environment") or {}).get("environment_variables") or {}
        location = S3Location.of(storage)
        credentials = s3_credentials(storage, environment if isinstance(environment, Mapping)
                                     else {}, cluster_storage)
        if credentials is None:
            raise StorageError(missing_credentials(location))
        return cls(storage, S3Store(location, credentials))

    def uuid_and_directory(self, path: str) -> tuple[str, Path | None]:
        """A recorded storage path, checked to lie in this storage (UnsafeCheckpointPath)."""
        if self.s3 is not None:
            return self.s3.location.uuid_of(path), None
        directory = checkpoint_dir_inside(path, str(self.storage.get("host_path") or ""))
        return directory.name, directory

    def delete(self, path: str) -> None:
        uuid, directory = self.uuid_and_directory(path)
        if self.s3 is not None:
            self.s3.delete(uuid)
        elif directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def listing(self, path: str) -> dict[str, int]:
        uuid, directory = self.uuid_and_directory(path)
        if self.s3 is not None:
            return self.s3.listing(uuid)
        assert directory is not None
        if not directory.is_dir():  # agents write it, and this host does not see it
            raise FileNotFoundError(path)
        found: dict[str, int] = {}
        for dirpath, _dirs, names in os.walk(directory):
            for name in names:
                full = Path(dirpath) / name
                if not full.is_symlink():
                    found[full.relative_to(directory).as_posix()] = full.stat().st_size
            if len(found) > MAX_FILES:
                raise StorageError(f"checkpoint {uuid} has more than {MAX_FILES} files")
        return dict(sorted(found.items()))

    def read(self, path: str, relpath: str) -> Iterator[bytes]:
        uuid, directory = self.uuid_and_directory(path)
        if self.s3 is not None:
            yield from self.s3.read(uuid, relpath)
            return
        assert directory is not None
        with open(directory / _clean_relpath(relpath), "rb") as file:
            yield from _chunks(file)


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    while chunk := file.read(1024 * 1024):
        yield chunk


def missing_credentials(location: S3Location) -> str:
    return (f"checkpoint_storage: {location.describe()}: the master needs credentials to "
            "restore and delete these checkpoints: give access_key and secret_key, or "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in "
            "environment.environment_variables")

"""Moving checkpoint files to and from S3 through URLs the master presigns.

The trial never holds S3 credentials of the cluster: it asks the master for one presigned URL
per file (per part for a large file), sends the files over several connections at once and
checks every part's ETag against the MD5 of the bytes it sent. The presigned requests go out
without the trial's token (S3 is not the master).
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import logging
import os
import pathlib
import re
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from harness.core._session import Session

logger = logging.getLogger("harness.core")

CONNECTIONS = 8  # files or parts in flight at once
_ATTEMPTS = 4
_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32})"?$')
_CHUNK = 1024 * 1024


class CheckpointStorageError(Exception):
    """S3 refused or could not be reached; the message names the bucket and the cause."""


class Transfer:
    """Uploads and downloads of one trial's S3 checkpoints (``storage`` is the experiment's
    ``checkpoint_storage``, for messages)."""

    def __init__(self, session: Session, task_id: str, storage: Mapping[str, Any],
                 *, connections: int = CONNECTIONS) -> None:
        self._session = session
        self._task_id = task_id
        self._where = (f"bucket {storage.get('bucket')!r} at "
                       f"{storage.get('endpoint_url') or 'AWS S3'}")
        self._connections = connections
        self._http = httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0),
                                  limits=httpx.Limits(max_connections=connections))

    def close(self) -> None:
        self._http.close()

    # -- upload ----------------------------------------------------------------------------------

    def upload(self, uuid: str, directory: pathlib.Path, files: Mapping[str, int]) -> None:
        """Send every file of ``directory`` named in ``files``; raises CheckpointStorageError."""
        plan = self._session.post(f"/api/v1/checkpoints/{uuid}/upload",
                                  body={"taskId": self._task_id, "files": dict(files)})["files"]
        jobs: list[Callable[[], Any]] = []
        multipart: list[tuple[dict[str, Any], list[str]]] = []
        for entry in plan:
            path = directory / entry["path"]
            size = files[entry["path"]]
            if "url" in entry:
                jobs.append(functools.partial(self._put, entry["url"], path, 0, size,
                                              entry["path"]))
                continue
            etags = [""] * len(entry["parts"])
            multipart.append((entry, etags))
            part_size = int(entry["partSize"])
            for n, url in enumerate(entry["parts"]):
                offset = n * part_size
                length = min(part_size, size - offset)

                def send(url: str = url, p: pathlib.Path = path, o: int = offset,
                         length: int = length, n: int = n, tags: list[str] = etags,
                         name: str = entry["path"]) -> None:
                    tags[n] = self._put(url, p, o, length, f"{name} (part {n + 1})")
                jobs.append(send)
        self._run(jobs)
        if multipart:
            self._session.post(f"/api/v1/checkpoints/{uuid}/upload/complete", body={
                "taskId": self._task_id,
                "files": [{"path": e["path"], "uploadId": e["uploadId"], "etags": tags}
                          for e, tags in multipart]})

    def _put(self, url: str, path: pathlib.Path, offset: int, length: int, what: str) -> str:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read(length)
        if len(data) != length:
            raise CheckpointStorageError(f"{what} changed while it was uploaded")
        digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
        answer = self._send("PUT", url, what, content=data,
                            headers={"Content-Type": "application/octet-stream"})
        etag = str(answer.headers.get("etag", ""))
        match = _MD5_ETAG.match(etag)
        if match and match.group(1) != digest:  # S3 names a plain part by its bytes' MD5
            raise CheckpointStorageError(
                f"uploading {what} to {self._where}: the stored bytes differ from those sent "
                f"(MD5 {digest}, ETag {etag})")
        return etag.strip('"')

    # -- download --------------------------------------------------------------------------------

    def download(self, uuid: str, directory: pathlib.Path) -> None:
        """Fetch every file of checkpoint ``uuid`` into ``directory`` (which exists)."""
        plan = self._session.get(f"/api/v1/checkpoints/{uuid}/files")["files"]
        jobs: list[Callable[[], Any]] = []
        for entry in plan:
            target = directory / _inside(entry["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            jobs.append(functools.partial(self._get, entry["url"], target, int(entry["size"]),
                                          entry["path"]))
        self._run(jobs)

    def _get(self, url: str, target: pathlib.Path, size: int, what: str) -> None:
        for attempt in range(_ATTEMPTS):
            try:
                with self._http.stream("GET", url) as answer:
                    if answer.status_code >= 400:
                        answer.read()
                        raise self._refused("downloading", what, answer)
                    written = 0
                    with open(target, "wb") as file:
                        for chunk in answer.iter_bytes(_CHUNK):
                            file.write(chunk)
                            written += len(chunk)
                if written != size:
                    raise CheckpointStorageError(
                        f"downloading {what} from {self._where}: got {written} of {size} bytes")
                return
            except httpx.TransportError as err:
                self._wait_or_raise(attempt, "downloading", what, err)

    # -- both ------------------------------------------------------------------------------------

    def _send(self, method: str, url: str, what: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(_ATTEMPTS):
            try:
                answer = self._http.request(method, url, **kwargs)
            except httpx.TransportError as err:
                self._wait_or_raise(attempt, "uploading", what, err)
                continue
            if answer.status_code < 400:
                return answer
            if answer.status_code < 500 or attempt + 1 == _ATTEMPTS:
                raise self._refused("uploading", what, answer)
            time.sleep(0.5 * 2 ** attempt)
        raise AssertionError("unreachable")

    def _wait_or_raise(self, attempt: int, doing: str, what: str, err: Exception) -> None:
        if attempt + 1 == _ATTEMPTS:
            raise CheckpointStorageError(
                f"{doing} {what}: cannot reach {self._where}: {type(err).__name__}: {err}"
            ) from err
        time.sleep(0.5 * 2 ** attempt)

    def _refused(self, doing: str, what: str, answer: httpx.Response) -> CheckpointStorageError:
        code, message = str(answer.status_code), answer.reason_phrase
        try:
            root = ElementTree.fromstring(answer.content)
            code = root.findtext("Code") or code
            message = root.findtext("Message") or message
        except ElementTree.ParseError:
            pass
        return CheckpointStorageError(f"{doing} {what} in {self._where} failed: {code}: "
                                      f"{message}")

    def _run(self, jobs: list[Callable[[], Any]]) -> None:
        """Run the jobs on several connections; the first failure cancels the rest."""
        if not jobs:
            return
        stop = threading.Event()

        def guarded(job: Callable[[], Any]) -> Any:
            if stop.is_set():
                return None
            return job()

        with concurrent.futures.ThreadPoolExecutor(self._connections,
                                                   thread_name_prefix="checkpoint-s3") as pool:
            futures = [pool.submit(guarded, job) for job in jobs]
            try:
                for future in concurrent.futures.as_completed(futures):
                    future.result()
            except BaseException:
                stop.set()
                for future in futures:
                    future.cancel()
                raise


def _inside(path: str) -> str:
    """A file path from the master, checked to stay inside the checkpoint's directory."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise CheckpointStorageError(f"refusing checkpoint file path {path!r}")
    return os.path.join(*parts)

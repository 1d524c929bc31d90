"""S3 checkpoints against a real S3 server (SeaweedFS) and a live master: the harness uploads
through presigned URLs, restores into its cache, and the master records only what is stored,
serves the files to their owner alone and deletes exactly a checkpoint's objects.

The experiment runs on a resource pool no agent serves; the test plays the trial process, in a
thread, with the real `harness.core` (as tests/integration/test_harness_live.py does).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import tarfile
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.settings import Settings
from common.checkpoint_storage import PART_SIZE
from deploy.master import check_default_storage
from harness import core
from harness.core import APIError, TrialInfo
from harness.core._checkpoint import CACHE_ENV
from harness.core._s3 import CheckpointStorageError
from tests.integration.test_api import create, wait_for_trials
from tests.integration.test_harness_live import trial_info
from tests.master_fixtures import LiveMaster
from tests.s3_fixtures import S3Server

pytestmark = pytest.mark.asyncio(loop_scope="session")

LARGE = PART_SIZE + 5 * 1024 * 1024  # goes up as a multipart upload of two parts


def files_of_a_checkpoint() -> dict[str, bytes]:
    """Many small files in directories, and one file larger than a part."""
    files = {f"shards/{i:02d}/part.bin": os.urandom(1000 + i) for i in range(24)}
    files["model.bin"] = os.urandom(LARGE)
    return files


async def s3_trial(api: httpx.AsyncClient, master: LiveMaster, storage: dict[str, Any],
                   **overrides: Any) -> tuple[dict[str, Any], TrialInfo]:
    created = await create(api, checkpoint_storage=storage, **overrides)
    experiment = created["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    # The trial gets the stored config (the agent's copy), not the API's redacted one.
    info = trial_info(master, experiment, trial, {**created["config"],
                                                   "checkpoint_storage": storage})
    return experiment, info


def store(info: TrialInfo, files: dict[str, bytes], steps: int = 10) -> str:
    with core.init(info=info) as ctx, ctx.checkpoint.store_path(
            {"steps_completed": steps}) as (path, storage_id):
        for name, data in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
    return storage_id


def restore(info: TrialInfo, storage_id: str) -> dict[str, bytes]:
    with core.init(info=info) as ctx, ctx.checkpoint.restore_path(storage_id) as path:
        return {p.relative_to(path).as_posix(): p.read_bytes()
                for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This 'agent's' checkpoint cache for the trial (the agent sets the variable)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


async def test_a_checkpoint_goes_to_s3_and_comes_back(
    api: httpx.AsyncClient, live_master: LiveMaster, s3_server: S3Server, cache: Path,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    bucket = s3_server.bucket()
    storage = s3_server.storage(bucket, prefix="team/a")
    experiment, info = await s3_trial(api, live_master, storage)
    files = files_of_a_checkpoint()

    storage_id = await asyncio.to_thread(store, info, files)

    stored = s3_server.objects(bucket)
    assert stored == {f"team/a/{storage_id}/{name}": len(data) for name, data in
                      {**files, "metadata.json": b"x" * stored[
                          f"team/a/{storage_id}/metadata.json"]}.items()}
    checkpoint = (await api.get(f"/api/v1/checkpoints/{storage_id}")).json()["checkpoint"]
    assert checkpoint["state"] == "STATE_COMPLETED"
    assert checkpoint["storagePath"] == f"s3://{bucket}/team/a/{storage_id}"
    assert checkpoint["resources"]["model.bin"] == LARGE
    # The cache kept what was uploaded: a restore on this agent downloads nothing.
    assert (cache / storage_id / "model.bin").stat().st_size == LARGE

    # Another agent (another cache) downloads it, byte for byte.
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "other-agent"))
    restored = await asyncio.to_thread(restore, info, storage_id)
    assert {k: v for k, v in restored.items() if k != "metadata.json"} == files
    assert b'"steps_completed": 10' in restored["metadata.json"]

    # The owner downloads it through the master as a tar (`epochal checkpoint download`).
    answer = await api.get(f"/api/v1/checkpoints/{storage_id}/download")
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as archive:
        names = {m.name: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]
    assert names["model.bin"] == files["model.bin"] and len(names) == len(files) + 1

    # Users see the config without its secret key; the trial's copy has it.
    described = (await api.get(f"/api/v1/experiments/{experiment['id']}")).json()
    assert described["config"]["checkpoint_storage"]["secret_key"] == "********"
    assert storage["secret_key"] not in described["experiment"]["originalConfig"]

    # Deleting the experiment deletes its objects, and nothing else in the bucket.
    s3_server.client.put_object(bucket, "team/a/not-a-checkpoint", io.BytesIO(b"keep"), 4)
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")
    await wait_until_ended(api, experiment["id"])
    answer = await api.delete(f"/api/v1/experiments/{experiment['id']}")
    assert answer.status_code == 200, answer.text
    assert s3_server.objects(bucket) == {"team/a/not-a-checkpoint": 4}


async def wait_until_ended(api: httpx.AsyncClient, experiment_id: int) -> None:
    for _ in range(300):
        state = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()["experiment"][
            "state"]
        if state in ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"experiment {experiment_id} did not end")


@pytest.mark.parametrize(("change", "expected"), [
    ({"secret_key": "wrong"}, r"bucket '{bucket}' at http://.*SignatureDoesNotMatch"),
    ({"access_key": "NOBODY"}, r"bucket '{bucket}' at http://.*InvalidAccessKeyId"),
    ({"bucket": "no-such-bucket"}, r"bucket 'no-such-bucket' at http://.*NoSuchBucket"),
    ({"endpoint_url": "http://127.0.0.1:9"}, r"bucket '{bucket}' at http://127.0.0.1:9.*"
                                               r"cannot reach"),
])
async def test_a_failed_upload_says_why_and_records_nothing(
    api: httpx.AsyncClient, live_master: LiveMaster, s3_server: S3Server, cache: Path,
    change: dict[str, str], expected: str,
) -> None:
    bucket = s3_server.bucket()
    storage = {**s3_server.storage(bucket), **change}
    experiment, info = await s3_trial(api, live_master, storage)

    with pytest.raises((APIError, CheckpointStorageError),
                       match=expected.format(bucket=bucket)):
        await asyncio.to_thread(store, info, {"w.bin": b"123"})

    assert s3_server.objects(bucket) == {}
    checkpoints = (await api.get(f"/api/v1/experiments/{experiment['id']}/checkpoints")).json()
    assert checkpoints["checkpoints"] == []
    assert list(cache.iterdir()) == []  # what was written for it is gone


async def test_a_report_of_files_never_uploaded_is_refused(
    api: httpx.AsyncClient, live_master: LiveMaster, s3_server: S3Server,
) -> None:
    bucket = s3_server.bucket()
    _, info = await s3_trial(api, live_master, s3_server.storage(bucket))
    claimed = str(uuid.uuid4())
    headers = {"Authorization": f"Bearer {info.session_token}"}
    answer = await api.post("/api/v1/checkpoints", headers=headers, json={
        "uuid": claimed, "taskId": info.task_id, "resources": {"weights.bin": 10},
        "metadata": {"steps_completed": 5}})
    assert answer.status_code == 400
    assert f"weights.bin is missing in s3://{bucket}/{claimed}" in answer.json()["message"]
    assert (await api.get(f"/api/v1/checkpoints/{claimed}")).status_code == 404


async def test_only_the_owner_reads_a_checkpoints_files(
    api: httpx.AsyncClient, live_master: LiveMaster, s3_server: S3Server, cache: Path,
) -> None:
    _, info = await s3_trial(api, live_master, s3_server.storage(s3_server.bucket()))
    storage_id = await asyncio.to_thread(store, info, {"w.bin": b"secret weights"})
    name = f"reader-{uuid.uuid4().hex[:6]}"
    made = await api.post("/api/v1/users", json={"user": {"username": name, "active": True},
                                                  "password": "Pw-12345678"})
    assert made.status_code == 200, made.text
    login = await api.post("/api/v1/auth/login", json={"username": name,
                                                       "password": "Pw-12345678"})
    other = {"Authorization": f"Bearer {login.json()['token']}"}
    for route in ("files", "download"):
        answer = await api.get(f"/api/v1/checkpoints/{storage_id}/{route}", headers=other)
        assert answer.status_code == 403, answer.text
        assert "belongs to admin" in answer.json()["message"]
    # Uploading into a recorded checkpoint is refused, even to its own trial.
    answer = await api.post(f"/api/v1/checkpoints/{storage_id}/upload",
                            headers={"Authorization": f"Bearer {info.session_token}"},
                            json={"taskId": info.task_id, "files": {"w.bin": 3}})
    assert answer.status_code == 409


async def test_s3_without_credentials_is_refused_at_submission(
    api: httpx.AsyncClient, s3_server: S3Server,
) -> None:
    storage = {"type": "s3", "bucket": "b", "endpoint_url": s3_server.endpoint_url}
    answer = await api.post("/api/v1/experiments", json={
        "config": f"entrypoint: python3 train.py\ncheckpoint_storage: {storage}\n"
                  "searcher: {name: single, metric: loss, max_length: {batches: 5}}\n"})
    assert answer.status_code == 400
    [detail] = answer.json()["details"]
    assert "bucket 'b'" in detail and "access_key and secret_key" in detail



async def test_the_master_checks_its_default_storage_at_boot_and_makes_the_bucket_if_asked(
    s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "epochal.master")
    bucket = f"boot-{uuid.uuid4().hex[:12]}"
    storage = s3_server.storage(bucket)
    await check_default_storage(Settings(checkpoint_storage=storage))
    assert f"bucket '{bucket}' at {s3_server.endpoint_url} does not exist" in caplog.text
    assert not s3_server.client.bucket_exists(bucket)

    caplog.clear()
    await check_default_storage(Settings(checkpoint_storage=storage, create_bucket=True))
    assert s3_server.client.bucket_exists(bucket)
    assert f"checkpoint storage: bucket '{bucket}'" in caplog.text and "(made)" in caplog.text

    caplog.clear()
    await check_default_storage(Settings(checkpoint_storage={**storage, "secret_key": "wrong"}))
    assert "SignatureDoesNotMatch" in caplog.text or "AccessDenied" in caplog.text

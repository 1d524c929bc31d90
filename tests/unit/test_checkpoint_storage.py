"""Where a checkpoint's files are, and the guard on what the master may delete or read there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.checkpoint_storage import (
    CheckpointFiles,
    S3Location,
    StorageError,
    UnsafeCheckpointPath,
    s3_credentials,
    storage_path,
)


def shared_fs(root: Path) -> CheckpointFiles:
    return CheckpointFiles.of({"checkpoint_storage": {"type": "shared_fs",
                                                      "host_path": str(root)}}, None)


def test_deletes_a_checkpoint_inside_its_storage(tmp_path: Path) -> None:
    target = tmp_path / "storage" / "uuid-1"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "weights.npz").write_bytes(b"xy")
    files = shared_fs(tmp_path / "storage")
    assert files.listing(str(target)) == {"sub/weights.npz": 2}
    assert b"".join(files.read(str(target), "sub/weights.npz")) == b"xy"
    files.delete(str(target))
    assert not target.exists()
    files.delete(str(target))  # already gone: no error


@pytest.mark.parametrize(
    "path",
    ["", ".", "relative/uuid", "{root}", "{root}/..", "{root}/../elsewhere", "/", "{link}/x"],
)
def test_refuses_to_delete_anything_outside_its_storage(tmp_path: Path, path: str) -> None:
    root = tmp_path / "storage"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "x").mkdir(parents=True)
    os.symlink(elsewhere, root / "link")
    with pytest.raises(UnsafeCheckpointPath):
        shared_fs(root).delete(path.format(root=root, link=root / "link"))
    assert (elsewhere / "x").exists() and root.exists()


def test_refuses_without_a_storage_root(tmp_path: Path) -> None:
    with pytest.raises(UnsafeCheckpointPath):
        CheckpointFiles.of({"checkpoint_storage": {"type": "shared_fs"}}, None).delete(
            str(tmp_path / "x"))


def test_a_directory_this_host_does_not_see_is_not_an_empty_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        shared_fs(tmp_path / "storage").listing(str(tmp_path / "storage" / "elsewhere"))


def test_refuses_to_read_outside_the_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "storage" / "u").mkdir(parents=True)
    (tmp_path / "secret").write_text("no")
    with pytest.raises(ValueError, match="relative file path"):
        b"".join(shared_fs(tmp_path / "storage").read(str(tmp_path / "storage" / "u"),
                                                       "../../secret"))


S3 = {"type": "s3", "bucket": "b", "prefix": "runs/", "endpoint_url": "http://127.0.0.1:9"}


def test_s3_objects_of_a_checkpoint_are_named_as_determined_names_them() -> None:
    location = S3Location.of(S3)
    assert storage_path(S3, "u1") == "s3://b/runs/u1"
    assert location.key("u1", "a/b.bin") == "runs/u1/a/b.bin"
    assert location.uuid_of("s3://b/runs/u1") == "u1"
    assert S3Location.of({**S3, "prefix": None}).key("u1") == "u1/"


@pytest.mark.parametrize("path", ["s3://other/runs/u1", "s3://b/runs/u1/x", "s3://b/runs/",
                                  "s3://b/runs/..", "s3://b/u1", "/tmp/u1"])
def test_s3_paths_outside_the_storage_are_refused(path: str) -> None:
    with pytest.raises(UnsafeCheckpointPath):
        S3Location.of(S3).uuid_of(path)


def test_s3_credentials_come_from_the_config_or_the_experiments_environment() -> None:
    cluster = {**S3, "access_key": "cluster", "secret_key": "cluster-secret"}
    keyed = {**S3, "access_key": "mine", "secret_key": "my-secret"}
    assert s3_credentials(keyed, {}, cluster).access_key == "mine"  # type: ignore[union-attr]
    env = {"AWS_ACCESS_KEY_ID": "env", "AWS_SECRET_ACCESS_KEY": "env-secret"}
    assert s3_credentials(S3, env, None).access_key == "env"  # type: ignore[union-attr]
    # The cluster's keys serve its own storage only: not another prefix or bucket.
    assert s3_credentials(S3, {}, cluster).access_key == "cluster"  # type: ignore[union-attr]
    assert s3_credentials({**S3, "prefix": "elsewhere"}, {}, cluster) is None
    assert s3_credentials({**S3, "bucket": "other"}, {}, cluster) is None


def test_s3_storage_without_credentials_is_refused_naming_the_bucket() -> None:
    with pytest.raises(StorageError, match="bucket 'b' at http://127.0.0.1:9.*access_key"):
        CheckpointFiles.of({"checkpoint_storage": S3}, None)

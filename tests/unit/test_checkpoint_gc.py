"""Checkpoint retention and the guard on what garbage collection may delete."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.checkpoint_gc import (
    RetentionPolicy,
    StoredCheckpoint,
    UnsafeCheckpointPath,
    checkpoints_to_keep,
    delete_checkpoint_files,
)


def ckpt(uuid: str, trial: int, steps: int, metric: float | None) -> StoredCheckpoint:
    return StoredCheckpoint(uuid, trial, steps, metric)


def test_keeps_each_trials_latest_and_best_and_the_experiments_best() -> None:
    checkpoints = [
        ckpt("a1", 1, 10, 0.5), ckpt("a2", 1, 20, 0.9), ckpt("a3", 1, 30, 0.7),
        ckpt("b1", 2, 10, 0.2), ckpt("b2", 2, 20, 0.3), ckpt("b3", 2, 30, None),
    ]
    policy = RetentionPolicy(save_experiment_best=1, save_trial_best=1, save_trial_latest=1)
    assert checkpoints_to_keep(checkpoints, policy) == {"a3", "a1", "b3", "b1"}
    larger = RetentionPolicy(save_trial_best=1, save_trial_latest=0, smaller_is_better=False)
    assert checkpoints_to_keep(checkpoints, larger) == {"a2", "b2"}
    assert checkpoints_to_keep(checkpoints, RetentionPolicy(0, 0, 0)) == set()


def test_deletes_a_checkpoint_inside_its_storage(tmp_path: Path) -> None:
    target = tmp_path / "storage" / "uuid-1"
    target.mkdir(parents=True)
    (target / "weights.npz").write_bytes(b"x")
    delete_checkpoint_files(str(target), str(tmp_path / "storage"))
    assert not target.exists()
    delete_checkpoint_files(str(target), str(tmp_path / "storage"))  # already gone: no error


@pytest.mark.parametrize(
    "storage_path",
    ["", ".", "relative/uuid", "{root}", "{root}/..", "{root}/../elsewhere", "/", "{link}/x"],
)
def test_refuses_to_delete_anything_outside_its_storage(tmp_path: Path, storage_path: str) -> None:
    root = tmp_path / "storage"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "x").mkdir(parents=True)
    os.symlink(elsewhere, root / "link")
    path = storage_path.format(root=root, link=root / "link")
    with pytest.raises(UnsafeCheckpointPath):
        delete_checkpoint_files(path, str(root))
    assert (elsewhere / "x").exists() and root.exists()


def test_refuses_without_a_storage_root(tmp_path: Path) -> None:
    with pytest.raises(UnsafeCheckpointPath):
        delete_checkpoint_files(str(tmp_path / "x"), "")

"""Checkpoint retention: which checkpoints an ended experiment keeps."""

from __future__ import annotations

from activities.checkpoint_gc import RetentionPolicy, StoredCheckpoint, checkpoints_to_keep


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

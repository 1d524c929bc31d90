"""Which checkpoints an experiment keeps when it ends, and deleting the rest.

Determined's policy: per trial keep the `save_trial_latest` newest and the `save_trial_best` best
(by the searcher metric validated at the checkpoint's step), and across the experiment keep the
`save_experiment_best` best. Everything else is deleted from storage and marked DELETED.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.expconf import RetentionCounts

_DEFAULT_COUNTS = RetentionCounts()


@dataclass(frozen=True)
class StoredCheckpoint:
    uuid: str
    trial_id: int
    steps_completed: int
    metric: float | None  # the searcher metric validated at this checkpoint's step, if any


@dataclass(frozen=True)
class RetentionPolicy:
    """The config's retention counts (their defaults are RetentionCounts') and the metric's
    direction."""

    save_experiment_best: int = _DEFAULT_COUNTS.save_experiment_best
    save_trial_best: int = _DEFAULT_COUNTS.save_trial_best
    save_trial_latest: int = _DEFAULT_COUNTS.save_trial_latest
    smaller_is_better: bool = True


def _best_first(
    checkpoints: list[StoredCheckpoint], smaller_is_better: bool
) -> list[StoredCheckpoint]:
    scored = [c for c in checkpoints if c.metric is not None]
    return sorted(
        scored,
        key=lambda c: (c.metric if smaller_is_better else -c.metric, -c.steps_completed),  # type: ignore[operator]
    )


def checkpoints_to_keep(checkpoints: list[StoredCheckpoint], policy: RetentionPolicy) -> set[str]:
    """The uuids the policy keeps; every other checkpoint may be deleted."""
    keep: set[str] = set()
    by_trial: dict[int, list[StoredCheckpoint]] = {}
    for ckpt in checkpoints:
        by_trial.setdefault(ckpt.trial_id, []).append(ckpt)
    for trial_ckpts in by_trial.values():
        newest = sorted(trial_ckpts, key=lambda c: c.steps_completed, reverse=True)
        keep.update(c.uuid for c in newest[: policy.save_trial_latest])
        best = _best_first(trial_ckpts, policy.smaller_is_better)
        keep.update(c.uuid for c in best[: policy.save_trial_best])
    best_overall = _best_first(checkpoints, policy.smaller_is_better)
    keep.update(c.uuid for c in best_overall[: policy.save_experiment_best])
    return keep

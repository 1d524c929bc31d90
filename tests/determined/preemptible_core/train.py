"""A training script for Determined 0.38's Core API that honours preemption, for
tests/determined/test_det_preemption.py.

Hyperparameters: steps (its length), sleep (seconds per step), checkpoint_every (steps). Every
step reports a training metric and prints "trained step N"; every `checkpoint_every` steps, and
whenever `core_context.preempt.should_preempt()` turns true, it stores a checkpoint with
`core_context.checkpoint.store_path`; told to stop, it returns (exit 0) so its trial can resume
from `det.get_cluster_info().latest_checkpoint` later. At the end it reports a validation of
the searcher's metric.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import determined as det


def save(core_context: det.core.Context, steps_completed: int) -> str:
    with core_context.checkpoint.store_path({"steps_completed": steps_completed}) as (
            path, storage_id):
        (path / "state.json").write_text(json.dumps({"steps_completed": steps_completed}))
    print(f"checkpoint {storage_id} at step {steps_completed}", flush=True)
    return str(storage_id)


def train(core_context: det.core.Context, hparams: dict[str, Any],
          latest_checkpoint: str | None) -> None:
    steps, sleep = int(hparams["steps"]), float(hparams["sleep"])
    every = int(hparams["checkpoint_every"])
    steps_completed = 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            steps_completed = json.loads((path / "state.json").read_text())["steps_completed"]
        print(f"resumed from checkpoint {latest_checkpoint} at step {steps_completed}",
              flush=True)
    while steps_completed < steps:
        time.sleep(sleep)
        steps_completed += 1
        core_context.train.report_training_metrics(
            steps_completed=steps_completed, metrics={"loss": 1.0 / steps_completed})
        print(f"trained step {steps_completed}", flush=True)
        saved = steps_completed % every == 0 or steps_completed == steps
        if saved:
            save(core_context, steps_completed)
        core_context.train.report_progress(steps_completed / steps)
        if steps_completed < steps and core_context.preempt.should_preempt():
            if not saved:
                save(core_context, steps_completed)
            print(f"preempted at step {steps_completed}", flush=True)
            return
    core_context.train.report_validation_metrics(
        steps_completed=steps, metrics={"loss": 1.0 / steps})


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "runs on a cluster"
    # MANUAL: Determined's automatic TensorBoard writer is not what this test is about.
    with det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as core_context:
        train(core_context, info.trial.hparams, info.latest_checkpoint)


if __name__ == "__main__":
    main()

"""Run by the Determined venv's python (Determined 0.38.1): every call `determined.core` makes
on the way through a training script, made with Determined's own classes against an Epochal
master.

Reads DET_MASTER, DET_SESSION_TOKEN, and EPOCHAL_TEST_{TRIAL,EXPERIMENT}_ID, EPOCHAL_TEST_TASK_ID,
EPOCHAL_TEST_ALLOCATION_ID, EPOCHAL_TEST_{CHECKPOINT,DELETED}_UUID; prints what came back as JSON.
"""

from __future__ import annotations

import json
import os

from determined import core
from determined.common import api
from determined.common.api import bindings
from determined.core._preempt import _PreemptionWatcher


def main() -> None:
    env = os.environ
    trial_id = int(env["EPOCHAL_TEST_TRIAL_ID"])
    experiment_id = int(env["EPOCHAL_TEST_EXPERIMENT_ID"])
    task_id, allocation_id = env["EPOCHAL_TEST_TASK_ID"], env["EPOCHAL_TEST_ALLOCATION_ID"]
    session = api.TaskSession(
        master=api.canonicalize_master_url(env["DET_MASTER"]),
        username="admin",
        token=env["DET_SESSION_TOKEN"],
        cert=None,
        max_retries=None,
    )
    dist = core.DummyDistributedContext()
    out: dict[str, object] = {}

    prepared = bindings.post_RunPrepareForReporting(
        session,
        body=bindings.v1RunPrepareForReportingRequest(
            runId=trial_id, checkpointStorage={"type": "directory", "container_path": "/tmp"}
        ),
    )
    out["storage_id"] = prepared.storageId

    metrics = core._MetricsContext(session, trial_id, 1)
    train = core.TrainContext(
        session, trial_id, experiment_id, metrics, dist, core.TensorboardMode.MANUAL, None, None
    )
    metrics.start()
    out["best_before"] = train.get_experiment_best_validation()
    train.report_training_metrics(steps_completed=10, metrics={"loss": 1.5})
    train.report_validation_metrics(steps_completed=10, metrics={"loss": 0.75, "acc": 0.5})
    train.report_metrics("inference", 10, {"latency": 0.01})
    metrics.close()
    train.report_progress(0.25)
    train.set_status("warming up")
    out["best_after"] = train.get_experiment_best_validation()

    checkpoints = core.CheckpointContext(
        dist, None, session, task_id, allocation_id, core.TensorboardMode.MANUAL, None, None
    )
    storage_id = env["EPOCHAL_TEST_CHECKPOINT_UUID"]
    checkpoints._report_checkpoint(
        storage_id, {"weights.npy": 128, "state.json": 20}, {"steps_completed": 10, "note": "x"}
    )
    out["checkpoint_metadata"] = checkpoints.get_metadata(storage_id)
    checkpoint = bindings.get_GetCheckpoint(session, checkpointUuid=storage_id).checkpoint
    out["checkpoint_resources"] = checkpoint.resources
    deleted_id = env["EPOCHAL_TEST_DELETED_UUID"]  # what checkpoint.delete() reports
    checkpoints._report_checkpoint(deleted_id, {"a": 1}, {"steps_completed": 5})
    checkpoints._report_checkpoint_deleted(deleted_id, resources={})

    watcher = _PreemptionWatcher(session, allocation_id)
    out["preempt"] = watcher._get_preemption(0)
    core.PreemptContext(session, allocation_id, dist).acknowledge_preemption_signal()

    train.report_early_exit(core.EarlyExitReason.INVALID_HP)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""The Core API: what a training script uses to talk to Epochal.

.. code:: python

    import harness.core

    with harness.core.init() as core:
        hparams = core.info.hparams
        # The searcher's max_length when the config has one; else the script decides.
        for step in range(1, (core.info.max_length or 1000) + 1):
            loss = train_one_batch()
            core.train.report_training_metrics(step, {"loss": loss})
            if core.preempt.should_preempt():
                with core.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                    save(path)
                break

The same script runs off-cluster: metrics are logged and checkpoints go to ``./checkpoints``.
"""

from harness.core._checkpoint import CheckpointContext
from harness.core._context import Context, init
from harness.core._distributed import DistributedContext, DistributedError
from harness.core._info import TrialInfo
from harness.core._preempt import PreemptContext
from harness.core._session import APIError, MasterError, MasterUnavailable
from harness.core._train import EarlyExitReason, TrainContext

__all__ = [
    "APIError",
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DistributedError",
    "EarlyExitReason",
    "MasterError",
    "MasterUnavailable",
    "PreemptContext",
    "TrainContext",
    "TrialInfo",
    "init",
]

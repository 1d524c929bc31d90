"""A trial for the preemption tests (tests/e2e/test_preemption.py), on Epochal's harness.

Hyperparameters: steps (its length), sleep (seconds per step), checkpoint_every (steps), and
honors_preemption: when true (the default) it asks `core.preempt.should_preempt()` after every
step and, told to stop, checkpoints where it is and exits 0, as training code should; when false
it never asks, the code a pool's grace is there for.

Every step reports a training metric (`loss`) and prints "trained step N"; every checkpoint
prints "checkpoint UUID at step N". A run resumes from the trial's latest checkpoint, at the step
after it, and says so ("resumed from checkpoint UUID at step N"). At the end it reports the
searcher's metric once.
"""

import json
import time

import harness.core


def main() -> None:
    with harness.core.init() as core:
        hp = core.info.hparams
        steps, sleep, every = int(hp["steps"]), float(hp["sleep"]), int(hp["checkpoint_every"])
        honors = bool(hp.get("honors_preemption", True))
        step = 0
        if core.info.latest_checkpoint:
            with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
                step = int(json.loads((path / "state.json").read_text())["step"])
            print(f"resumed from checkpoint {core.info.latest_checkpoint} at step {step}",
                  flush=True)

        def checkpoint(at: int) -> None:
            with core.checkpoint.store_path({"steps_completed": at}) as (path, uuid):
                (path / "state.json").write_text(json.dumps({"step": at}))
            print(f"checkpoint {uuid} at step {at}", flush=True)

        while step < steps:
            time.sleep(sleep)
            step += 1
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
            print(f"trained step {step}", flush=True)
            saved = step % every == 0 or step == steps
            if saved:
                checkpoint(step)
            if honors and step < steps and core.preempt.should_preempt():
                if not saved:
                    checkpoint(step)
                print(f"preempted at step {step}: checkpointed, exiting", flush=True)
                return
        core.train.report_validation_metrics(steps, {"loss": 1.0 / steps})


if __name__ == "__main__":
    main()

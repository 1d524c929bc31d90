"""A slow trial for fault and dashboard tests: one step per `sleep` seconds, a checkpoint every
few steps.

Hyperparameters: sleep (seconds per step), checkpoint_every (steps), crash (exit 3 at once), lr
(optional: the loss then falls at that rate, so trials differ on the dashboard's charts).
Every step reports a training metric (keyed by step, so a resumed run never doubles one) and the
progress; every checkpoint a validation loss and accuracy. It resumes from its latest checkpoint
and stops when preempted (pause), like real training code.
"""

import json
import logging
import math
import sys
import time

import harness.core


def losses(lr: float | None, step: int) -> tuple[float, float]:
    """Training and validation loss at `step`: 1/step without an lr, else a decay at lr."""
    if lr is None:
        return 1.0 / step, 1.0 / step
    train = 0.1 + 2.0 * math.exp(-lr * step / 10)
    return train, train * 1.1 + 0.05 / lr / 100


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    with harness.core.init(hparams={"sleep": 0.05, "checkpoint_every": 5}, max_length=20) as core:
        hp = core.info.hparams
        if hp.get("crash"):
            print("crashing on purpose", flush=True)
            sys.exit(3)
        lr = float(hp["lr"]) if hp.get("lr") is not None else None
        step = 0
        if core.info.latest_checkpoint:
            with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
                step = json.loads((path / "state.json").read_text())["step"]
            print(f"resumed from checkpoint {core.info.latest_checkpoint} at step {step}",
                  flush=True)
        total = core.info.max_length
        while step < total:
            time.sleep(float(hp["sleep"]))
            step += 1
            train, validation = losses(lr, step)
            core.train.report_training_metrics(step, {"loss": train})
            core.train.report_progress(step / total)
            if step % int(hp["checkpoint_every"]) == 0 or step == total:
                core.train.report_validation_metrics(
                    step, {"validation_loss": validation, "accuracy": 1 - validation / 3})
                with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "state.json").write_text(json.dumps({"step": step}))
                print(f"checkpoint at step {step}: validation_loss {validation:.4f}", flush=True)
            if step < total and core.preempt.should_preempt():
                print(f"preempted at step {step}", flush=True)
                break


if __name__ == "__main__":
    main()

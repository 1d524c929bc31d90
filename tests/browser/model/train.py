"""A small trial for the dashboard's browser tests: curves that differ by learning rate.

Hyperparameters: lr (how fast the loss falls), sleep (seconds per step), checkpoint_every
(steps). Each step reports a training loss; each checkpoint a validation loss and accuracy, so
the charts have one distinct line per trial and the scatter a point per learning rate. It
resumes from its latest checkpoint and stops when preempted (pause), like real training code.
"""

import json
import math
import time

import harness.core


def losses(lr: float, step: int) -> tuple[float, float]:
    train = 0.1 + 2.0 * math.exp(-lr * step / 10)
    return train, train * 1.1 + 0.05 / lr / 100


def main() -> None:
    defaults = {"lr": 0.1, "sleep": 0.05, "checkpoint_every": 5}
    with harness.core.init(hparams=defaults, max_length=50) as core:
        hp = core.info.hparams
        lr, every = float(hp["lr"]), int(hp["checkpoint_every"])
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
            if step % every == 0 or step == total:
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

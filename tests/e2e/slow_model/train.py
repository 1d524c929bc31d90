"""A slow trial for fault tests: one step per `sleep` seconds, a checkpoint every few steps.

Hyperparameters: sleep (seconds per step), checkpoint_every (steps), crash (exit 3 at once).
Every step reports a training metric (keyed by step, so a resumed run never doubles one).
"""

import json
import logging
import sys
import time

import harness.core


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    with harness.core.init(hparams={"sleep": 0.05, "checkpoint_every": 5}, max_length=20) as core:
        hp = core.info.hparams
        if hp.get("crash"):
            print("crashing on purpose", flush=True)
            sys.exit(3)
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
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
            if step % int(hp["checkpoint_every"]) == 0 or step == total:
                core.train.report_validation_metrics(step, {"validation_loss": 1.0 / step})
                with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "state.json").write_text(json.dumps({"step": step}))
                print(f"checkpoint at step {step}", flush=True)
            if step < total and core.preempt.should_preempt():
                break


if __name__ == "__main__":
    main()

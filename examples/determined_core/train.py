"""A training script written for Determined 0.38's Core API; it runs unchanged on Epochal.

NumPy only: a linear model fitted by minibatch SGD to a seeded synthetic regression problem.
It reports training and validation metrics, stores a checkpoint with `store_path` at every
validation, resumes from `info.latest_checkpoint`, stops when `should_preempt()` says so (pause,
cancel, a searcher's early stop), and reports progress.

Run it on a cluster with `det experiment create const.yaml .` (or `epochal experiment create`);
off a cluster `python3 train.py` runs it locally with Determined's dummy contexts.
"""

from __future__ import annotations

import json
import logging
import pathlib
import time
from typing import Any

import determined as det
import numpy as np

FEATURES = 16
TRAIN_ROWS = 2048
VALIDATION_ROWS = 512


def make_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The same problem for every trial: y = X @ w_true + noise."""
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=FEATURES)
    x = rng.normal(size=(TRAIN_ROWS + VALIDATION_ROWS, FEATURES))
    y = x @ w_true + 0.1 * rng.normal(size=len(x))
    return x[:TRAIN_ROWS], y[:TRAIN_ROWS], x[TRAIN_ROWS:], y[TRAIN_ROWS:]


def mse(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x @ w - y) ** 2))


def save(path: pathlib.Path, w: np.ndarray, steps_completed: int) -> None:
    np.save(path / "weights.npy", w)
    (path / "state.json").write_text(json.dumps({"steps_completed": steps_completed}))


def load(core_context: det.core.Context, storage_id: str) -> tuple[np.ndarray, int]:
    with core_context.checkpoint.restore_path(storage_id) as path:
        w = np.load(path / "weights.npy")
        steps_completed = json.loads((path / "state.json").read_text())["steps_completed"]
    return w, int(steps_completed)


def train(core_context: det.core.Context, hparams: dict[str, Any], max_batches: int,
          latest_checkpoint: str | None, trial_seed: int) -> None:
    x_train, y_train, x_val, y_val = make_data(seed=0)
    rng = np.random.default_rng(trial_seed)
    w, steps_completed = np.zeros(FEATURES), 0
    if latest_checkpoint is not None:
        w, steps_completed = load(core_context, latest_checkpoint)
        logging.info("resumed from checkpoint %s at batch %d", latest_checkpoint,
                     steps_completed)

    lr, batch_size = float(hparams["learning_rate"]), int(hparams["batch_size"])
    period = int(hparams["validation_period"])
    pause = float(hparams.get("seconds_per_batch", 0.0))
    losses: list[float] = []
    while steps_completed < max_batches:
        rows = rng.integers(0, TRAIN_ROWS, size=batch_size)
        xb, yb = x_train[rows], y_train[rows]
        error = xb @ w - yb
        w -= lr * 2 * xb.T @ error / batch_size
        losses.append(float(np.mean(error**2)))
        steps_completed += 1
        if pause:
            time.sleep(pause)

        if steps_completed % period and steps_completed < max_batches:
            continue
        core_context.train.report_training_metrics(
            steps_completed=steps_completed, metrics={"loss": float(np.mean(losses))})
        losses = []
        core_context.train.report_validation_metrics(
            steps_completed=steps_completed, metrics={"validation_loss": mse(w, x_val, y_val)})
        checkpoint_metadata = {"steps_completed": steps_completed}
        with core_context.checkpoint.store_path(checkpoint_metadata) as (path, storage_id):
            save(path, w, steps_completed)
        core_context.train.report_progress(steps_completed / max_batches)
        if core_context.preempt.should_preempt():
            logging.info("preempted at batch %d; checkpoint %s holds the state",
                         steps_completed, storage_id)
            return


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    if info is None:  # off a cluster: Determined's dummy contexts, default hyperparameters
        hparams = {"learning_rate": 0.05, "batch_size": 32, "validation_period": 50}
        max_batches, latest, seed = 200, None, 0
    else:
        hparams = info.trial.hparams
        # searcher.max_length, as Determined's own examples read it ({batches: N}).
        max_batches = int(info.trial._config["searcher"]["max_length"]["batches"])
        latest, seed = info.latest_checkpoint, info.trial.trial_seed
    # MANUAL: Determined's automatic TensorBoard writer needs PyTorch or TensorFlow, and this
    # script has neither (Determined's own images always bring one).
    with det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as core_context:
        train(core_context, hparams, max_batches, latest, seed)


if __name__ == "__main__":
    main()

"""Digits: a NumPy MLP classifying scikit-learn's bundled 8x8 digits, trained with harness.core.

Runs on an Epochal cluster (``entrypoint: python3 train.py``) and, unchanged, on a laptop:
``python3 train.py`` trains with ``DEFAULT_HPARAMS`` and keeps checkpoints in ./checkpoints.

Resuming is exact: a checkpoint holds the weights, the momentum buffers, this epoch's data order
and the RNG state, so a run that is preempted and resumed ends with the same weights, bit for
bit, as one that was not.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import harness.core

logger = logging.getLogger("digits")

DEFAULT_HPARAMS: dict[str, Any] = {
    "learning_rate": 0.05,
    "hidden_size": 64,
    "weight_decay": 1e-4,
    "activation": "relu",
    "batch_size": 32,
    "optimizer": {"momentum": 0.9},
}
TRAINING_REPORT_PERIOD = 10  # batches between training-loss reports
DEFAULT_VALIDATION_PERIOD = 50  # batches between validations (hparam "validation_period")
DEFAULT_BATCHES = 300  # how long to train when the config names no searcher.max_length
ACTIVATIONS = ("relu", "tanh")
CHECKPOINT_FORMAT = 1


class InvalidHP(ValueError):
    """The trial's hyperparameters cannot be trained."""


@dataclass(frozen=True)
class HParams:
    learning_rate: float
    hidden_size: int
    weight_decay: float
    activation: str
    batch_size: int
    momentum: float
    validation_period: int

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> HParams:
        def number(name: str, value: Any, *, low: float, high: float = math.inf) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidHP(f"{name} must be a number, got {value!r}")
            if not (low <= value <= high) or not math.isfinite(value):
                raise InvalidHP(f"{name} must be in [{low}, {high}], got {value!r}")
            return float(value)

        def integer(name: str, value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidHP(f"{name} must be an int >= 1, got {value!r}")
            return value

        optimizer = raw.get("optimizer") or {}
        if not isinstance(optimizer, dict):
            raise InvalidHP(f"optimizer must be a group of hyperparameters, got {optimizer!r}")
        activation = raw.get("activation", "relu")
        if activation not in ACTIVATIONS:
            raise InvalidHP(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        learning_rate = number("learning_rate", raw.get("learning_rate"), low=0.0)
        if learning_rate == 0.0:
            raise InvalidHP("learning_rate must be > 0")
        return cls(
            learning_rate=learning_rate,
            hidden_size=integer("hidden_size", raw.get("hidden_size")),
            weight_decay=number("weight_decay", raw.get("weight_decay", 0.0), low=0.0),
            activation=activation,
            batch_size=integer("batch_size", raw.get("batch_size", 32)),
            momentum=number(
                "optimizer.momentum", optimizer.get("momentum", 0.0), low=0.0, high=0.999
            ),
            validation_period=integer(
                "validation_period", raw.get("validation_period", DEFAULT_VALIDATION_PERIOD)
            ),
        )


@dataclass(frozen=True)
class Data:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray


def load_data() -> Data:
    """The 1797 digits, scaled to [0, 1]; a fixed 80/20 split shared by every trial.

    They are scikit-learn's bundled `datasets/data/digits.csv.gz` (64 pixels and the label per
    row), read as `load_digits()` reads them but without importing scikit-learn, which costs
    every trial more than a second of CPU (it loads SciPy). Without scikit-learn installed this
    fails as its import would."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
    csv = pathlib.Path(spec.submodule_search_locations[0]) / "datasets/data/digits.csv.gz"
    with gzip.open(csv, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    x = rows[:, :64] / 16.0
    y = rows[:, 64].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    n_val = len(x) // 5
    val, tr = order[:n_val], order[n_val:]
    return Data(x_train=x[tr], y_train=y[tr], x_val=x[val], y_val=y[val])


@dataclass
class State:
    """Everything that determines the rest of training."""

    params: dict[str, np.ndarray]
    velocity: dict[str, np.ndarray]
    rng: np.random.Generator
    order: np.ndarray  # this epoch's order of training examples
    steps_completed: int = 0
    loss_sum: float = 0.0  # training losses since the last training report
    loss_count: int = 0


def init_state(hp: HParams, n_inputs: int, n_classes: int, n_train: int, seed: int) -> State:
    rng = np.random.default_rng(seed)
    gain = 2.0 if hp.activation == "relu" else 1.0
    params = {
        "w1": rng.normal(0.0, math.sqrt(gain / n_inputs), (n_inputs, hp.hidden_size)),
        "b1": np.zeros(hp.hidden_size),
        "w2": rng.normal(0.0, math.sqrt(1.0 / hp.hidden_size), (hp.hidden_size, n_classes)),
        "b2": np.zeros(n_classes),
    }
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    return State(params, velocity, rng, order=np.arange(n_train))


def forward(
    params: dict[str, np.ndarray], x: np.ndarray, activation: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pre = x @ params["w1"] + params["b1"]
    hidden = np.maximum(pre, 0.0) if activation == "relu" else np.tanh(pre)
    return pre, hidden, hidden @ params["w2"] + params["b2"]


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and the softmax probabilities."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(y)), y].mean()), np.exp(log_probs)


def sgd_step(state: State, hp: HParams, x: np.ndarray, y: np.ndarray) -> float:
    """One step of SGD with momentum and L2 weight decay; returns the batch loss."""
    p = state.params
    pre, hidden, logits = forward(p, x, hp.activation)
    loss, probs = cross_entropy(logits, y)
    loss += 0.5 * hp.weight_decay * float((p["w1"] ** 2).sum() + (p["w2"] ** 2).sum())
    d_logits = probs
    d_logits[np.arange(len(y)), y] -= 1.0
    d_logits /= len(y)
    d_hidden = d_logits @ p["w2"].T
    d_pre = d_hidden * (pre > 0.0) if hp.activation == "relu" else d_hidden * (1.0 - hidden**2)
    grads = {
        "w1": x.T @ d_pre + hp.weight_decay * p["w1"],
        "b1": d_pre.sum(axis=0),
        "w2": hidden.T @ d_logits + hp.weight_decay * p["w2"],
        "b2": d_logits.sum(axis=0),
    }
    for k, g in grads.items():
        state.velocity[k] = hp.momentum * state.velocity[k] - hp.learning_rate * g
        p[k] = p[k] + state.velocity[k]
    return loss


def evaluate(state: State, hp: HParams, data: Data) -> dict[str, float]:
    _, _, logits = forward(state.params, data.x_val, hp.activation)
    loss, _ = cross_entropy(logits, data.y_val)
    accuracy = float((logits.argmax(axis=1) == data.y_val).mean())
    return {"validation_loss": loss, "accuracy": accuracy}


def save_checkpoint(path: pathlib.Path, state: State) -> None:
    arrays = {k: v for k, v in state.params.items()}
    arrays.update({f"velocity_{k}": v for k, v in state.velocity.items()})
    np.savez(path / "weights.npz", order=state.order, **arrays)
    meta = {
        "format": CHECKPOINT_FORMAT,
        "steps_completed": state.steps_completed,
        "rng_state": state.rng.bit_generator.state,
        "loss_sum": state.loss_sum,
        "loss_count": state.loss_count,
    }
    (path / "state.json").write_text(json.dumps(meta, indent=1) + "\n")


def load_checkpoint(path: pathlib.Path, hp: HParams) -> State:
    meta = json.loads((path / "state.json").read_text())
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} has format {meta.get('format')!r}, not 1")
    with np.load(path / "weights.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    if arrays["w1"].shape[1] != hp.hidden_size:
        raise ValueError(
            f"checkpoint {path} has hidden_size {arrays['w1'].shape[1]}, "
            f"the trial has {hp.hidden_size}"
        )
    rng = np.random.default_rng()
    rng.bit_generator.state = meta["rng_state"]
    names = ("w1", "b1", "w2", "b2")
    return State(
        params={k: arrays[k] for k in names},
        velocity={k: arrays[f"velocity_{k}"] for k in names},
        rng=rng,
        order=arrays["order"],
        steps_completed=int(meta["steps_completed"]),
        loss_sum=float(meta["loss_sum"]),
        loss_count=int(meta["loss_count"]),
    )


def total_batches(info: harness.core.TrialInfo, batch_size: int, n_train: int) -> int:
    """The searcher's length in batches; with no `max_length` (optional, as in Determined 0.38)
    the script decides: DEFAULT_BATCHES."""
    if info.max_length is None:
        return DEFAULT_BATCHES
    if info.length_unit == "batches":
        return info.max_length
    if info.length_unit == "epochs":
        return info.max_length * (n_train // batch_size)
    return math.ceil(info.max_length / batch_size)


@dataclass
class TrainResult:
    status: str  # "completed", "preempted" or "invalid_hp"
    steps_completed: int = 0
    last_checkpoint: str | None = None
    validation: dict[str, float] | None = None
    params: dict[str, np.ndarray] = field(default_factory=dict)


def train(core: harness.core.Context) -> TrainResult:
    """Train one trial with ``core``'s hyperparameters, resuming from its latest checkpoint."""
    try:
        hp = HParams.parse(core.info.hparams)
    except InvalidHP as e:
        logger.error("invalid hyperparameters: %s", e)
        core.train.report_early_exit("invalid_hp")
        return TrainResult(status="invalid_hp")

    data = load_data()
    n_train = len(data.x_train)
    if hp.batch_size > n_train:
        logger.error("batch_size %d exceeds the %d training examples", hp.batch_size, n_train)
        core.train.report_early_exit("invalid_hp")
        return TrainResult(status="invalid_hp")
    per_epoch = n_train // hp.batch_size
    total = total_batches(core.info, hp.batch_size, n_train)

    if core.info.latest_checkpoint:
        with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
            state = load_checkpoint(path, hp)
        logger.info("resumed from checkpoint %s at batch %d", path.name, state.steps_completed)
    else:
        n_inputs, n_classes = data.x_train.shape[1], int(data.y_train.max()) + 1
        state = init_state(hp, n_inputs, n_classes, n_train, core.info.trial_seed)

    result = TrainResult(status="completed", steps_completed=state.steps_completed)

    def checkpoint() -> None:
        metadata = {"steps_completed": state.steps_completed, "framework": "numpy"}
        with core.checkpoint.store_path(metadata) as (path, storage_id):
            save_checkpoint(path, state)
        result.last_checkpoint = storage_id
        result.steps_completed = state.steps_completed

    while state.steps_completed < total:
        position = state.steps_completed % per_epoch
        if position == 0:
            state.order = state.rng.permutation(n_train)
        idx = state.order[position * hp.batch_size : (position + 1) * hp.batch_size]
        loss = sgd_step(state, hp, data.x_train[idx], data.y_train[idx])
        state.steps_completed += 1
        state.loss_sum += loss
        state.loss_count += 1
        steps = state.steps_completed

        if steps % TRAINING_REPORT_PERIOD == 0 or steps == total:
            core.train.report_training_metrics(steps, {"loss": state.loss_sum / state.loss_count})
            state.loss_sum, state.loss_count = 0.0, 0
            core.train.report_progress(steps / total)
        if steps % hp.validation_period == 0 or steps == total:
            result.validation = evaluate(state, hp, data)
            core.train.report_validation_metrics(steps, result.validation)
            checkpoint()
        if steps < total and core.preempt.should_preempt():
            if result.last_checkpoint is None or result.steps_completed != steps:
                checkpoint()
            logger.info("preempted at batch %d of %d; checkpoint %s", steps, total,
                        result.last_checkpoint)
            result.status = "preempted"
            break

    result.steps_completed = state.steps_completed
    result.params = state.params
    return result


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The keywords only matter off-cluster; on the cluster the trial info decides.
    with harness.core.init(hparams=DEFAULT_HPARAMS, max_length=300) as core:
        result = train(core)
    logger.info(
        "%s after %d batches: %s", result.status, result.steps_completed, result.validation
    )


if __name__ == "__main__":
    main()

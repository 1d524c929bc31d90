"""A PyTorchTrial on synthetic tensors, written the way Determined's PyTorch tutorial writes one
(a `PyTorchTrial` subclass trained by `det.pytorch.Trainer` under `det.pytorch.init()`).

Epochal's tests run it unchanged, with Determined 0.38.1's own harness and torch from the
agent's task environment: it trains a linear model, validates, checkpoints (Determined copies
the model definition into each checkpoint's `code/`), stops when paused and resumes from its
latest checkpoint.

Hyperparameters: learning_rate, batch_size, batches (how long to train), seconds_per_batch (a
pause in every batch, so a test can pause the trial mid-way).
"""

import logging
import time
from typing import Any

import determined as det
import torch
from determined import pytorch
from torch import nn

FEATURES = 4
TRUE_WEIGHTS = [[1.0], [-2.0], [0.5], [3.0]]


def synthetic_data(rows: int, seed: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(rows, FEATURES, generator=generator)
    targets = features @ torch.tensor(TRUE_WEIGHTS) + 0.25
    return torch.utils.data.TensorDataset(features, targets)


class LinearTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict[str, Any]) -> None:
        self.context = context
        self.hparams = hparams
        self.model = context.wrap_model(nn.Linear(FEATURES, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=hparams["learning_rate"])
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(synthetic_data(512, seed=1),
                                  batch_size=self.hparams["batch_size"], shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(synthetic_data(128, seed=2),
                                  batch_size=self.hparams["batch_size"])

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int,
                    batch_idx: int) -> dict[str, Any]:
        features, targets = batch
        loss = nn.functional.mse_loss(self.model(features), targets)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        time.sleep(self.hparams["seconds_per_batch"])
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict[str, Any]:
        features, targets = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(features), targets)}


def main() -> None:
    info = det.get_cluster_info()
    assert info is not None, "this script trains on a cluster"
    hparams = info.trial.hparams
    with pytorch.init() as train_context:
        trial = LinearTrial(train_context, hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=pytorch.Batch(hparams["batches"]),
            checkpoint_period=pytorch.Batch(20),
            validation_period=pytorch.Batch(40),
            latest_checkpoint=info.latest_checkpoint,  # where a paused trial resumes from
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()

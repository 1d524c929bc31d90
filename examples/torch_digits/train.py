"""Torch digits: a small CNN on scikit-learn's bundled 8x8 digits, trained with PyTorch's
DistributedDataParallel on every slot of the trial, and harness.core.

One slot: ``entrypoint: python3 train.py``. Several (on one agent or many):
``entrypoint: python3 -m harness.launch.torch_distributed python3 train.py``, which starts one
process per slot under torchrun. Each rank trains on its own slice of every batch; DDP averages
the gradients, so the weights stay the same on every rank, which the script checks at the end.
The chief (rank 0) reports metrics and stores checkpoints; every rank resumes from them.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import pathlib
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import harness.core

logger = logging.getLogger("torch_digits")

# step_seconds slows every batch down (0: full speed), to watch a pause or a failure mid-run.
DEFAULT_HPARAMS: dict[str, Any] = {"learning_rate": 0.05, "channels": 16, "batch_size": 32,
                                   "momentum": 0.9, "step_seconds": 0.0}
DEFAULT_BATCHES = 200
TRAINING_REPORT_PERIOD = 10
VALIDATION_PERIOD = 50
CHECKPOINT_FILE = "state.pt"


class DigitsNet(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * channels * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train and validation splits, the same on every rank (a fixed shuffle).

    The digits are scikit-learn's bundled `datasets/data/digits.csv.gz` (64 pixels and the
    label per row, what `load_digits()` reads), read without importing scikit-learn: that
    import costs every rank about a second of CPU before its first batch."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-learn is not installed: its bundled digits are the data")
    csv = pathlib.Path(spec.submodule_search_locations[0]) / "datasets/data/digits.csv.gz"
    with gzip.open(csv, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.tensor(rows[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    y = torch.tensor(rows[:, 64], dtype=torch.long)
    order = torch.tensor(np.random.default_rng(0).permutation(len(y)))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def batch_indices(step: int, batch_size: int, world: int, rank: int, n: int) -> torch.Tensor:
    """This rank's slice of global batch `step`: the global batch is batch_size x world samples
    of an epoch's permutation (seeded by the epoch), rank r takes every world-th of them."""
    per_epoch = n // (batch_size * world)
    epoch, within = divmod(step - 1, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
    start = within * batch_size * world
    return order[start:start + batch_size * world][rank::world]


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)  # several ranks share the agent's cores
    with harness.core.init(hparams=DEFAULT_HPARAMS, max_length=DEFAULT_BATCHES) as core:
        train(core)


def train(core: harness.core.Context) -> None:
    hp = {**DEFAULT_HPARAMS, **core.info.hparams}
    rank, world = core.distributed.rank, core.distributed.size
    if world > 1:
        dist.init_process_group("gloo")  # torchrun's MASTER_ADDR/PORT, RANK, WORLD_SIZE
    torch.manual_seed(core.info.trial_seed)
    model: nn.Module = DigitsNet(int(hp["channels"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(hp["learning_rate"]),
                                momentum=float(hp["momentum"]))
    step = 0
    if core.info.latest_checkpoint:
        with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
            state = torch.load(path / CHECKPOINT_FILE, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        logger.info("rank %d resumed from checkpoint %s at batch %d", rank,
                    core.info.latest_checkpoint, step)
    ddp = DistributedDataParallel(model) if world > 1 else model
    x_train, y_train, x_val, y_val = load_data()
    batch_size = int(hp["batch_size"])
    last = core.info.max_length or DEFAULT_BATCHES
    loss_fn = nn.CrossEntropyLoss()

    def store(step: int) -> None:
        if rank == 0:
            with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "step": step}, pathlib.Path(path) / CHECKPOINT_FILE)

    started, first = time.monotonic(), step + 1
    while step < last:
        step += 1
        idx = batch_indices(step, batch_size, world, rank, len(y_train))
        optimizer.zero_grad()
        loss = loss_fn(ddp(x_train[idx]), y_train[idx])
        loss.backward()
        optimizer.step()
        if step == first:
            logger.info("rank %d of %d finished its first batch (%d)", rank, world, step)
        time.sleep(float(hp["step_seconds"]))
        if step % TRAINING_REPORT_PERIOD == 0:
            mean = loss.detach().clone()
            if world > 1:
                dist.all_reduce(mean)
                mean /= world
            core.train.report_training_metrics(step, {"loss": float(mean)})
        if step % VALIDATION_PERIOD == 0 or step == last:
            with torch.no_grad():
                logits = model(x_val)
                val_loss = float(loss_fn(logits, y_val))
                accuracy = float((logits.argmax(1) == y_val).float().mean())
            core.train.report_validation_metrics(
                step, {"validation_loss": val_loss, "accuracy": accuracy})
            store(step)
        if core.preempt.should_preempt():
            store(step)
            logger.info("rank %d stops at batch %d (preempted)", rank, step)
            return
    elapsed = time.monotonic() - started
    logger.info("rank %d trained batches %d-%d in %.2f s: %.1f batches/s, %.0f samples/s "
                "over all ranks", rank, first, last, elapsed, (last - first + 1) / elapsed,
                (last - first + 1) * batch_size * world / elapsed)
    digests = core.distributed.allgather(weights_digest(model))
    if len(set(digests)) != 1:
        raise RuntimeError(f"the ranks' weights differ: {digests}")
    logger.info("weights identical on %d ranks: %s", world, digests[0])
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A Determined Core API script trained with DistributedDataParallel, as Determined's users
write them: started by `python3 -m determined.launch.torch_distributed python3 train.py`, it
takes its place from `DistributedContext.from_torch_distributed()`, reports from the chief,
stores a sharded checkpoint (every rank writes its own file) and checks at the end that every
rank holds the same weights.
"""

import hashlib
import logging

import determined as det
import torch
import torch.distributed as dist
from torch import nn


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(core_context: det.core.Context) -> None:
    rank, size = core_context.distributed.rank, core_context.distributed.size
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = int(det.get_cluster_info().trial.hparams["steps"])
    for step in range(1, steps + 1):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * size + rank))
        loss = ddp(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 5 == 0:
            core_context.train.report_training_metrics(step, {"loss": float(loss)})
    if rank == 0:
        core_context.train.report_validation_metrics(steps, {"validation_loss": float(loss)})
    with core_context.checkpoint.store_path({"steps_completed": steps}, shard=True) as (path, _):
        torch.save(model.state_dict(), path / f"rank-{rank}.pt")
    digests = core_context.distributed.allgather(digest(model))
    assert len(set(digests)) == 1, digests
    if rank == 0:
        logging.info("weights identical on %d ranks: %s", size, digests[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context)

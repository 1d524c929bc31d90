"""``python -m harness.launch.torch_distributed [TORCHRUN_OPTIONS... --] SCRIPT...``

Runs SCRIPT under torchrun, one process per slot of this agent's part of the trial, joined with
the other agents' parts: the trial info's rendezvous gives the number of agents (nodes), this
agent's rank among them, the chief's address and a port free on it. Each process's output lines
start with ``[rank=N]``. Options before ``--`` go to torchrun and win over the launcher's (as
with Determined's launcher). The process group's backend is the caller's choice; PyTorch picks
gloo for CPU tensors and NCCL for CUDA ones when none is named, and ``CUDA_VISIBLE_DEVICES``
already names this agent's GPUs, so local rank N uses ``cuda:N``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence

from harness.core import _info

USAGE = ("usage: python -m harness.launch.torch_distributed [TORCHRUN_OPTIONS... --] SCRIPT...\n"
         "  e.g. python -m harness.launch.torch_distributed python3 train.py")


def split_arguments(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(torchrun options, script): options are what comes before the first `--`, if any."""
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        return args[:cut], args[cut + 1:]
    return [], args


def torchrun_command(info: _info.TrialInfo, overrides: Sequence[str],
                     script: Sequence[str]) -> list[str]:
    """The torchrun command line for this agent's part of the trial."""
    rendezvous = info.rendezvous or {}
    addrs = list(rendezvous.get("container_addrs") or ["127.0.0.1"])
    ports = list(rendezvous.get("ports") or [])
    if not ports:
        raise SystemExit("the trial info names no rendezvous port; is this an Epochal trial?")
    chief = "127.0.0.1" if len(addrs) == 1 else str(addrs[0])
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(len(addrs)),
        "--nproc_per_node", str(max(1, len(info.slot_ids))),
        "--node_rank", str(int(rendezvous.get("container_rank") or 0)),
        "--master_addr", chief,
        "--master_port", str(ports[0]),
        "--max_restarts", "0",
        *overrides,
        "--no-python", sys.executable, "-m", "harness.launch.wrap_rank", "--", *script,
    ]


def main(argv: Sequence[str]) -> int:
    overrides, script = split_arguments(argv)
    if not script:
        print(USAGE, file=sys.stderr)
        return 2
    info = _info.from_environment()
    if info is None:
        print("harness.launch.torch_distributed runs on the cluster: EPOCHAL_TRIAL_INFO is not "
              "set", file=sys.stderr)
        return 2
    child = subprocess.Popen(torchrun_command(info, overrides, script))

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

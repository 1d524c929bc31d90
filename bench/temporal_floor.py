"""The CPU floor of one Temporal workflow per trial, without Epochal: what bench/scale.py's
platform CPU per trial cannot go below while each trial is a workflow with one run activity.

Starts the Temporal dev server as the embedded cluster does (SQLite file, WAL, headless) and,
in this process, a worker with the smallest trial: a workflow that runs one activity (on
another task queue, as a trial's run goes to its agent's), then sends `--signals` signals to a
long-lived workflow and returns. One signal is the least a trial sends (its close, told to its
experiment); Epochal's trials also ask their pool for slots (an update) and give them back (a
signal): `--signals 3` is that traffic. `--workflows` of them run, `--concurrent` at a time,
started by this process's client as the master starts trials; nothing waits on a trial's
result. Measured, per workflow: the Temporal server's CPU and this process's CPU (client,
worker, SDK core), user+system seconds from psutil, before and after. The last line is the
one-line summary.

    .venv/bin/python bench/temporal_floor.py [--workflows 2000] [--concurrent 8] [--signals 1]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psutil
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from bench.common.temporal import dev_server  # noqa: E402
from deploy.temporal_server import NAMESPACE  # noqa: E402

WORKFLOW_QUEUE = "floor-workflows"
ACTIVITY_QUEUE = "floor-agent"


class Runs:
    """The agent's side: a trial's run frees its place among the `concurrent` in flight."""

    def __init__(self, concurrent: int) -> None:
        self.places = asyncio.Semaphore(concurrent)

    @activity.defn(name="run_trial")
    async def run_trial(self, x: float) -> float:
        self.places.release()
        return (x - 0.3) ** 2


@workflow.defn(sandboxed=False)
class Collector:
    """Stands for the experiment (and the pool): takes the trials' signals, ends at `expected`."""

    def __init__(self) -> None:
        self.count = 0

    @workflow.run
    async def run(self, expected: int) -> int:
        await workflow.wait_condition(lambda: self.count >= expected)
        return self.count

    @workflow.signal
    def closed(self, _: int) -> None:
        self.count += 1


@workflow.defn(sandboxed=False)
class Trial:
    @workflow.run
    async def run(self, x: float, signals: int, collector: str) -> float:
        loss: float = await workflow.execute_activity(
            "run_trial", x, result_type=float, task_queue=ACTIVITY_QUEUE,
            start_to_close_timeout=timedelta(minutes=1))
        handle = workflow.get_external_workflow_handle(collector)
        for _ in range(signals):
            await handle.signal(Collector.closed, 0)
        return loss


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


async def run(address: str, workflows: int, concurrent: int, signals: int) -> float:
    """Run the workflows; the seconds of wall time they took. Nothing waits on a trial's
    result (the master does not either): the collector ends when every signal came."""
    runs = Runs(concurrent)
    client = await Client.connect(address, namespace=NAMESPACE)
    async with Worker(client, task_queue=WORKFLOW_QUEUE, workflows=[Trial, Collector]), \
            Worker(client, task_queue=ACTIVITY_QUEUE, activities=[runs.run_trial]):
        collector = await client.start_workflow(
            Collector.run, workflows * signals, id=f"collector-{uuid.uuid4()}",
            task_queue=WORKFLOW_QUEUE)
        started = time.perf_counter()
        for i in range(workflows):
            await runs.places.acquire()
            await client.start_workflow(Trial.run, args=[i / workflows, signals, collector.id],
                                        id=f"trial-{uuid.uuid4()}", task_queue=WORKFLOW_QUEUE)
        assert await collector.result() == workflows * signals
        wall = time.perf_counter() - started
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflows", type=int, default=2000)
    p.add_argument("--concurrent", type=int, default=8)
    p.add_argument("--signals", type=int, default=1,
                   help="signals each workflow sends at its end (at least its close)")
    add_smoke_option(p, workflows=2, concurrent=2, signals=1)
    args = parse_args(p)
    if args.signals < 1:
        p.error("--signals: at least 1 (a trial's close is told; the bench waits for those)")

    with tempfile.TemporaryDirectory(prefix="epochal-floor-") as state, \
            dev_server(Path(state)) as (address, pid):
        temporal, me = psutil.Process(pid), psutil.Process()
        before = cpu(temporal), cpu(me)
        wall = asyncio.run(run(address, args.workflows, args.concurrent, args.signals))
        after = cpu(temporal), cpu(me)
    n = args.workflows
    server_cpu, worker_cpu = (after[0] - before[0]) / n, (after[1] - before[1]) / n
    print(f"workflows:        {n}, {args.concurrent} at a time, one activity and "
          f"{args.signals} signals each")
    print(f"wall time:        {wall:.1f} s ({n / wall:.1f} workflows/s)")
    print(f"temporal_floor: Temporal {server_cpu:.3f} core-s, client and worker "
          f"{worker_cpu:.3f} core-s per workflow ({n} workflows, {args.signals} signals each, "
          f"{n / wall:.1f} workflows/s)")


if __name__ == "__main__":
    main()

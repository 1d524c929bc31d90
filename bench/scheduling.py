"""Scheduler throughput and latency: N short trials over M agents through ResourcePoolWorkflow.

Starts a Temporal dev server (or uses --temporal), a master-side worker in this process (the
real ResourcePoolWorkflow and the real `request_slots`/`release_slots` activities), and M agents
as workers on their own task queues `agent.<id>`, spread over a few processes. Each trial is a
child workflow that does what TrialWorkflow does around a run: ask the pool for slots (the real
`workflows.allocation.Allocator`, through local activities as trials do), run one activity on
the granted agent's queue, give the slots back. The floor is the same N trials as bare child
workflows whose activity goes to one shared queue polled with the same total concurrency, with
no scheduler.

Measured:
  - wait: from "trial wants slots" (the child's clock before asking) to "run started" (the
    activity's first line), p50/p99; the "free slots" phases have no more trials than slots,
    once all at once (a burst on the one pool workflow) and once arriving at a steady rate;
  - throughput: trials completed per second over the whole batch.
The last line is the one-line summary.

    .venv/bin/python bench/scheduling.py [--agents 50] [--slots 2] [--trials 1000] \
        [--run-seconds 0.2] [--processes 4] [--arrival-rate 10] [--poll 0.5] \
        [--temporal HOST:PORT] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from temporalio import activity, workflow  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import RetryPolicy  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from activities.scheduler import SchedulerActivities  # noqa: E402
from agent_worker.liveness import Liveness  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from bench.common.temporal import dev_server  # noqa: E402
from common.temporal_names import (  # noqa: E402
    MASTER_TASK_QUEUE,
    agent_task_queue,
    resource_pool_workflow_id,
)
from wire.pools import (  # noqa: E402
    AgentRegistration,
    Allocation,
    PoolInput,
    SlotRequest,
)
from workflows.allocation import Allocator, Resources  # noqa: E402
from workflows.resource_pool import ResourcePoolWorkflow  # noqa: E402

FLOOR_QUEUE = "bench-floor"


@dataclass
class RunInput:
    wanted_at: float  # epoch seconds when the trial asked for slots
    seconds: float


@dataclass
class TrialTimes:
    wanted_at: float
    started_at: float
    ended_at: float


@dataclass
class BenchTrialInput:
    mode: str  # "pool" | "floor"
    pool: str
    experiment_id: int
    trial_id: int
    run_seconds: float


@dataclass
class BenchInput:
    mode: str
    pool: str
    trials: int
    run_seconds: float
    experiments: int = 4
    first_experiment: int = 1  # allocation ids must be new in every phase
    interval: float = 0.0  # seconds between trial starts (0: all at once)


@activity.defn(name="bench_run")
async def bench_run(inp: RunInput) -> TrialTimes:
    started = time.time()
    await asyncio.sleep(inp.seconds)
    return TrialTimes(inp.wanted_at, started, time.time())


@workflow.defn(name="BenchTrialWorkflow")
class BenchTrialWorkflow:
    def __init__(self) -> None:
        self._allocator = Allocator()
        self._allocator.local = True  # as a trial of TRIAL_REVISION asks and gives back

    @workflow.run
    async def run(self, inp: BenchTrialInput) -> TrialTimes:
        wanted = workflow.now().timestamp()
        opts = {"start_to_close_timeout": timedelta(minutes=10),
                "retry_policy": RetryPolicy(maximum_attempts=1)}
        if inp.mode == "floor":
            result: TrialTimes = await workflow.execute_activity(
                bench_run, RunInput(wanted, inp.run_seconds), task_queue=FLOOR_QUEUE, **opts)
            return result
        resources = Resources(pool=inp.pool, slots=1, priority=42, max_slots=None)
        request = SlotRequest(
            allocation_id=f"{inp.experiment_id}.{inp.trial_id}.1",
            workflow_id=workflow.info().workflow_id, experiment_id=inp.experiment_id,
            trial_id=inp.trial_id)
        allocation = await self._allocator.acquire(resources, request, lambda: False)
        assert allocation is not None
        try:
            result = await workflow.execute_activity(
                bench_run, RunInput(wanted, inp.run_seconds), task_queue=allocation.task_queue,
                **opts)
        finally:
            await self._allocator.release(resources, allocation.allocation_id)
        return result

    @workflow.signal
    def slots_granted(self, allocation: Allocation) -> None:
        self._allocator.granted(allocation)


@workflow.defn(name="BenchParentWorkflow")
class BenchParentWorkflow:
    @workflow.run
    async def run(self, inp: BenchInput) -> list[TrialTimes]:
        prefix = workflow.info().workflow_id
        children = []
        for i in range(inp.trials):
            if inp.interval and i:
                await workflow.sleep(inp.interval)
            children.append(asyncio.ensure_future(workflow.execute_child_workflow(
                BenchTrialWorkflow.run,
                BenchTrialInput(inp.mode, inp.pool, inp.first_experiment + i % inp.experiments, i,
                                inp.run_seconds),
                id=f"{prefix}-t{i}",
            )))
        return list(await asyncio.gather(*children))


async def _agents_main(address: str, pool: str, agent_ids: list[str], slots: int) -> None:
    client = await Client.connect(address)
    workers = []
    for agent_id in agent_ids:
        liveness = Liveness(agent_id)
        workers.append(Worker(client, task_queue=agent_task_queue(agent_id),
                              activities=[bench_run, liveness.agent_liveness],
                              max_concurrent_activities=slots + 2))
    # The floor's shared queue, with the same total concurrency as these agents' slots.
    workers.append(Worker(client, task_queue=FLOOR_QUEUE, activities=[bench_run],
                          max_concurrent_activities=slots * len(agent_ids)))
    for agent_id in agent_ids:
        await client.start_workflow(
            "ResourcePoolWorkflow", PoolInput(name=pool), id=resource_pool_workflow_id(pool),
            task_queue=MASTER_TASK_QUEUE, start_signal="register_agent",
            start_signal_args=[AgentRegistration(agent_id, list(range(slots)),
                                                 uuid.uuid4().hex)])
    await asyncio.gather(*(w.run() for w in workers))


def agents_process(address: str, pool: str, agent_ids: list[str], slots: int) -> None:
    quiet()
    asyncio.run(_agents_main(address, pool, agent_ids, slots))


def quiet() -> None:
    """Agents stopped at the end cancel their liveness activities; that is not news."""
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PHASES = iter(range(1, 1000))


async def phase(client: Client, mode: str, pool: str, trials: int,
                run_seconds: float, interval: float = 0.0) -> tuple[float, list[float]]:
    begin = time.time()
    first = next(PHASES) * 100
    times: list[TrialTimes] = await client.execute_workflow(
        BenchParentWorkflow.run,
        BenchInput(mode, pool, trials, run_seconds, first_experiment=first, interval=interval),
        id=f"bench-{mode}-{uuid.uuid4().hex[:6]}", task_queue=MASTER_TASK_QUEUE,
        result_type=list[TrialTimes])
    elapsed = time.time() - begin
    waits = [t.started_at - t.wanted_at for t in times]
    return trials / elapsed, waits


async def bench(args: argparse.Namespace, address: str) -> str:
    client = await Client.connect(address)
    pool = f"bench-{uuid.uuid4().hex[:6]}"
    ids = [f"{pool}-agent-{i}" for i in range(args.agents)]
    groups = [ids[i::args.processes] for i in range(args.processes)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=agents_process, args=(address, pool, g, args.slots), daemon=True)
             for g in groups if g]
    for p in procs:
        p.start()
    total_slots = args.agents * args.slots
    try:
        async with Worker(client, task_queue=MASTER_TASK_QUEUE,
                          workflows=[ResourcePoolWorkflow, BenchTrialWorkflow,
                                     BenchParentWorkflow],
                          activities=SchedulerActivities(client).all(),
                          workflow_runner=UnsandboxedWorkflowRunner(),
                          max_concurrent_workflow_tasks=200, max_concurrent_activities=400):
            handle = client.get_workflow_handle(resource_pool_workflow_id(pool))
            while True:  # every agent registered and watched
                try:
                    described = await handle.query("describe")
                    if sum(a["alive"] for a in described["agents"]) == args.agents:
                        break
                except Exception:
                    pass
                await asyncio.sleep(args.poll)
            print(f"{args.agents} agents x {args.slots} slots = {total_slots} slots, "
                  f"{len(procs)} agent processes; trials run {args.run_seconds} s")
            free_n = min(args.trials, total_slots)
            _, burst_waits = await phase(client, "pool", pool, free_n, args.run_seconds)
            print(f"free slots, {free_n} trials at once: wait p50 "
                  f"{pct(burst_waits, .5) * 1000:.0f} ms, "
                  f"p99 {pct(burst_waits, .99) * 1000:.0f} ms")
            _, free_waits = await phase(client, "pool", pool, free_n, args.run_seconds,
                                        interval=1 / args.arrival_rate)
            print(f"free slots, {free_n} trials arriving at {args.arrival_rate:g}/s: wait p50 "
                  f"{pct(free_waits, .5) * 1000:.0f} ms, p99 {pct(free_waits, .99) * 1000:.0f} ms")
            rate, waits = await phase(client, "pool", pool, args.trials, args.run_seconds)
            print(f"scheduler ({args.trials} trials): {rate:.1f} trials/s, wait p50 "
                  f"{pct(waits, .5) * 1000:.0f} ms, p99 {pct(waits, .99) * 1000:.0f} ms")
            floor, floor_waits = await phase(client, "floor", pool, args.trials, args.run_seconds)
            print(f"floor ({args.trials} trials, no scheduler): {floor:.1f} trials/s, wait p50 "
                  f"{pct(floor_waits, .5) * 1000:.0f} ms, p99 "
                  f"{pct(floor_waits, .99) * 1000:.0f} ms")
            generation = (await handle.query("describe"))["generation"]
            print(f"pool continued as new {generation} times")
    finally:
        for p in procs:
            p.terminate()
    ideal = total_slots / args.run_seconds
    return (f"summary: {args.trials} trials / {args.agents} agents: scheduler "
            f"{rate:.1f} trials/s vs floor {floor:.1f} trials/s ({100 * rate / floor:.0f}% of "
            f"floor; ideal {ideal:.0f}/s); wait with free slots p50 "
            f"{pct(free_waits, .5) * 1000:.0f} ms p99 {pct(free_waits, .99) * 1000:.0f} ms "
            f"({args.arrival_rate:g} trials/s arriving), {pct(burst_waits, .99) * 1000:.0f} ms "
            f"p99 for {free_n} at once")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--run-seconds", type=float, default=0.2)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--arrival-rate", type=float, default=10.0,
                   help="trials per second in the steady free-slots phase")
    p.add_argument("--poll", type=float, default=0.5,
                   help="seconds between looks at the pool until every agent is registered")
    p.add_argument("--temporal", default=None, help="a running Temporal (default: start one)")
    add_smoke_option(p, agents=2, slots=1, trials=4, run_seconds=0.01, processes=1,
                     arrival_rate=50.0, poll=0.05)
    args = parse_args(p)
    quiet()
    if args.temporal:
        print(asyncio.run(bench(args, args.temporal)))
        return
    with tempfile.TemporaryDirectory(prefix="epochal-bench-") as tmp:
        root = Path(tmp)
        with dev_server(root) as (address, _):
            print(asyncio.run(bench(args, address)))


if __name__ == "__main__":
    main()

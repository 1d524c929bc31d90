"""Scheduling policy on a team's week: today's rule (no backfilling, no preemption) against
backfilling with preemption, side by side in one run, through the real ResourcePoolWorkflow.

A seeded synthetic trace stands for a team's week, compressed to minutes: jobs of 1, 2 or 4
slots arrive over the trace's length, most at priority 42, some at 50 (batch work) and a few
urgent ones at priority 1; each needs some seconds of work. The same trace is played twice on
simulated agents (workers on `agent.<id>` queues, with the real liveness activity), once per
policy, each on a pool of its own. A job is a workflow that does what TrialWorkflow does around
a run: ask the pool for slots (the real Allocator, through the real `request_slots` activity),
run on the granted agent, give the slots back; preempted by the pool, it stops at once, pays
`--checkpoint-seconds` to checkpoint (work lost to the preemption, as is `--restart-seconds` when
it starts again) and queues again with the work it has left.

Measured per policy:
  - utilisation: the slot-seconds jobs held, over the pool's slots times the time from the
    first arrival to the last end; and while jobs wait: the share of slots held at the moments
    some job waited for slots (what a policy can raise: idle slots with nothing waiting are the
    trace's quiet hours and its drain);
  - the urgent (priority 1) jobs' wait from arrival to start, p50 and max;
  - work lost to preemption: slot-seconds spent checkpointing and restarting;
  - the makespan and the mean wait of every job.
The last line is the one-line summary. `--explain FILE` also says why slots sat idle while jobs
waited: it records every scheduling pass of the pools (free slots per agent, the agents each
waiting request reserved, the requests left waiting), splits the idle slot-seconds by cause
(printed) and writes each idle interval, with the requests that waited, to FILE.

    .venv/bin/python bench/scheduler_policy.py [--agents 4] [--slots 4] [--jobs 80] \
        [--span 60] [--seed 7] [--checkpoint-seconds 0.5] [--restart-seconds 0.5] [--smoke] \
        [--explain FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import logging
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

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
    PoolPolicy,
    Preemption,
    SlotRequest,
)
from workflows.allocation import Allocator, Resources  # noqa: E402
from workflows.resource_pool import ResourcePoolWorkflow  # noqa: E402

URGENT = 1
POLICIES = {
    "today": PoolPolicy(preemption=False, backfill=False),
    "backfill+preempt": PoolPolicy(preemption=True, backfill=True,
                                   preemption_timeout_seconds=30),
}


@dataclass
class Job:
    index: int
    arrival: float  # seconds after the trace starts
    slots: int
    priority: int
    work: float  # seconds of work on its slots


def trace(seed: int, jobs: int, span: float, largest: int) -> list[Job]:
    """A team's week compressed to `span` seconds: mostly small jobs, a few large ones, a few
    urgent ones, arriving in bursts (mornings) and at random."""
    rng = random.Random(seed)
    out = []
    for i in range(jobs):
        burst = rng.random() < 0.5
        arrival = (rng.choice((0.0, 0.33, 0.66)) + rng.random() * 0.08 if burst
                   else rng.random()) * span
        slots = min(rng.choices([1, 2, 4], weights=[60, 25, 15])[0], largest)
        priority = rng.choices([42, 50], weights=[75, 25])[0]
        work = rng.uniform(0.05, 0.25) * span
        if i % 10 == 9:  # one job in ten is urgent, arriving once the week is busy
            priority, arrival, work = URGENT, (0.4 + 0.55 * rng.random()) * span, work / 3
        out.append(Job(i, arrival, slots, priority, work))
    return sorted(out, key=lambda j: j.arrival)


@dataclass
class RunInput:
    allocation_id: str
    work: float


@dataclass
class RunResult:
    done: float  # seconds of work done
    stopped: bool  # stopped by a preemption before the work was done


@dataclass
class JobInput:
    pool: str
    job: Job
    experiment_id: int
    checkpoint_seconds: float
    restart_seconds: float


@dataclass
class JobTimes:
    priority: int
    slots: int
    arrival: float  # epoch seconds
    started: float
    ended: float
    held: float  # slot-seconds holding slots
    lost: float  # slot-seconds spent checkpointing and restarting after preemptions
    preemptions: int = 0
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) holding slots


STOPS: dict[str, asyncio.Event] = {}  # allocation id -> stop requested (one agents' process)


@activity.defn(name="sim_train")
async def sim_train(inp: RunInput) -> RunResult:
    """Trains for `work` seconds, stopping at once when asked (`sim_stop`)."""
    stop = STOPS.setdefault(inp.allocation_id, asyncio.Event())
    begin = time.monotonic()
    try:
        await asyncio.wait_for(stop.wait(), inp.work)
        return RunResult(done=min(inp.work, time.monotonic() - begin), stopped=True)
    except TimeoutError:
        return RunResult(done=inp.work, stopped=False)
    finally:
        STOPS.pop(inp.allocation_id, None)


@activity.defn(name="sim_stop")
async def sim_stop(allocation_id: str) -> None:
    """The harness's should_preempt() turning true for the run."""
    STOPS.setdefault(allocation_id, asyncio.Event()).set()


@activity.defn(name="sim_pause")
async def sim_pause(seconds: float) -> None:
    """Checkpointing or restarting: the run holds its slots and does no work."""
    await asyncio.sleep(seconds)


@workflow.defn(name="PolicyBenchJob")
class PolicyBenchJob:
    def __init__(self) -> None:
        self._allocator = Allocator()
        self._allocator.local = True
        self._preempted: str | None = None

    @workflow.run
    async def run(self, inp: JobInput) -> JobTimes:
        job = inp.job
        arrival = workflow.now().timestamp()
        resources = Resources(pool=inp.pool, slots=job.slots, priority=job.priority,
                              max_slots=None)
        opts = {"start_to_close_timeout": timedelta(minutes=30),
                "retry_policy": RetryPolicy(maximum_attempts=1)}
        left, held, lost, started, runs = job.work, 0.0, 0.0, 0.0, 0
        spans: list[tuple[float, float]] = []
        while left > 1e-6:
            runs += 1
            key = f"{inp.experiment_id}.{job.index}.{runs}"
            request = SlotRequest(allocation_id=key, workflow_id=workflow.info().workflow_id,
                                  experiment_id=inp.experiment_id, trial_id=job.index,
                                  slots=job.slots, priority=job.priority)
            allocation = await self._allocator.acquire(resources, request, lambda: False)
            assert allocation is not None
            begin = workflow.now().timestamp()
            started = started or begin
            queue = allocation.task_queue
            try:
                if runs > 1:
                    await workflow.execute_activity(sim_pause, inp.restart_seconds,
                                                    task_queue=queue, **opts)
                    lost += inp.restart_seconds * job.slots
                run = workflow.start_activity(sim_train, RunInput(key, left), task_queue=queue,
                                              result_type=RunResult, **opts)
                await workflow.wait_condition(
                    lambda run=run, key=key: run.done() or self._preempted == key)
                if not run.done():
                    await workflow.execute_activity(sim_stop, key, task_queue=queue, **opts)
                result = await run
                left -= result.done
                if result.stopped and left > 1e-6:
                    await workflow.execute_activity(sim_pause, inp.checkpoint_seconds,
                                                    task_queue=queue, **opts)
                    lost += inp.checkpoint_seconds * job.slots
            finally:
                held += (workflow.now().timestamp() - begin) * job.slots
                spans.append((begin, workflow.now().timestamp()))
                await self._allocator.release(resources, key)
        return JobTimes(job.priority, job.slots, arrival, started, workflow.now().timestamp(),
                        held, lost, runs - 1, spans)

    @workflow.signal
    def slots_granted(self, allocation: Allocation) -> None:
        self._allocator.granted(allocation)

    @workflow.signal
    def preempt(self, preemption: Preemption) -> None:
        self._preempted = preemption.allocation_id


def busy_while_waiting(times: list[JobTimes], slots: int, step: float = 0.05) -> float:
    """The share of the pool's slots held while some job waited for slots (sampled every
    `step` seconds): what a scheduler can raise; idle slots with nothing waiting are not its
    fault (the trace's quiet hours and its drain)."""
    first = min(t.arrival for t in times)
    last = max(t.ended for t in times)
    used = waiting = 0.0
    now = first
    while now < last:
        held = sum(t.slots for t in times for a, b in t.runs if a <= now < b)
        if any(t.arrival <= now and not any(a <= now < b for a, b in t.runs) and now < t.ended
               for t in times):
            used += held
            waiting += slots
        now += step
    return used / waiting if waiting else 1.0


@dataclass
class Pass:
    """A pool's state after one scheduling pass (`--explain`)."""

    at: float  # epoch seconds
    free: dict[str, int]  # free slots per agent that takes work
    waiting: list[tuple[str, int, int]]  # (allocation id, slots, priority) left waiting
    reserved: dict[str, str]  # agent -> the request keeping it ("+" if it preempts for it)
    backfill: bool


PASSES: dict[str, list[Pass]] = {}  # pool name -> its passes, in order


def explain_pools() -> None:
    """Record every scheduling pass of the pools this process runs (the bench runs the real
    workflow unsandboxed, in this process): measurement only, never on replay."""
    schedule, reserve = ResourcePoolWorkflow._schedule, ResourcePoolWorkflow._reserve

    def reserving(self: Any, request: SlotRequest, avail: dict[str, list[int]],
                  coming_free: dict[str, int], *rest: Any) -> Any:
        answer = reserve(self, request, avail, coming_free, *rest)
        kept, chosen = answer[0], answer[1]
        preempts = bool(chosen) or any(coming_free.get(a, 0) for a in kept)
        for agent_id in kept:
            self._explained[agent_id] = request.allocation_id + ("+" if preempts else "")
        return answer

    def scheduling(self: Any) -> None:
        self._explained = {}
        schedule(self)
        if workflow.unsafe.is_replaying():
            return
        PASSES.setdefault(self._name, []).append(Pass(
            time.time(), {a: len(ids) for a, ids in self._free_slots().items()},
            [(r.allocation_id, r.slots, r.priority) for r in self._pending.values()],
            dict(self._explained), self._policy.backfill))

    ResourcePoolWorkflow._reserve = reserving  # type: ignore[method-assign]
    ResourcePoolWorkflow._schedule = scheduling  # type: ignore[method-assign]


CAUSES = {
    "latency": "scheduling latency (the pool counts them held: granted, not started yet; or "
               "ended, release not processed yet)",
    "head": "kept for the reserved head (its agents drain)",
    "preempt": "kept for a request whose victims checkpoint",
    "blocked": "blocked behind the head (no backfilling)",
    "fragmented": "fragmented (a waiting request fits them in sum, on no one agent)",
    "few": "too few (every waiting request needs more than are free)",
    "unheard": "nothing waiting at the pool (the request is not there yet)",
    "fits": "fit a waiting request, not placed",
}


def explain(times: list[JobTimes], passes: list[Pass], slots: int, path: Path | None,
            name: str, step: float = 0.05) -> None:
    """Split the idle slot-seconds while jobs waited (busy_while_waiting's samples) by cause,
    from the pool's passes; print the split, and write each idle interval to `path`."""
    first = min(t.arrival for t in times)
    last = max(t.ended for t in times)
    ats = [p.at for p in passes]
    idle: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
    capacity = 0.0
    intervals: dict[int, tuple[float, float, Counter[str]]] = {}
    now = first
    while now < last:
        held = sum(t.slots for t in times for a, b in t.runs if a <= now < b)
        waits = any(t.arrival <= now and not any(a <= now < b for a, b in t.runs)
                    and now < t.ended for t in times)
        i = bisect.bisect_right(ats, now) - 1
        if waits and i >= 0:
            capacity += slots * step
            p = passes[i]
            here: Counter[str] = Counter()
            here["latency"] = max(0, slots - held - sum(p.free.values()))
            loose = {a: n for a, n in p.free.items() if a not in p.reserved}
            for agent_id, n in p.free.items():
                if agent_id in p.reserved:
                    here["preempt" if p.reserved[agent_id].endswith("+") else "head"] += n
            spare = sum(loose.values())
            if spare:
                asks = [s for _, s, _ in p.waiting]
                if not asks:
                    cause = "unheard"
                elif not p.backfill:
                    cause = "blocked"
                elif any(s <= max(loose.values()) for s in asks):
                    cause = "fits"
                elif any(s <= spare for s in asks):
                    cause = "fragmented"
                else:
                    cause = "few"
                here[cause] += spare
            for cause, n in here.items():
                idle[cause] += n * step
            if sum(here.values()):
                begun, _, total = intervals.get(i, (now, now, Counter()))
                intervals[i] = (begun, now + step, total + Counter(
                    {c: n * step for c, n in here.items()}))
        now += step
    if not capacity:
        return
    shares = ", ".join(f"{key} {100 * seconds / capacity:.1f}%" for key, seconds in
                       sorted(idle.items(), key=lambda kv: -kv[1]) if seconds)
    print(f"  idle while jobs wait ({name}; % of slot-s while waiting): {shares}", flush=True)
    if path is None:
        return
    with path.open("a") as out:
        out.write(f"# {name}: {sum(idle.values()):.1f} idle slot-s of {capacity:.1f} while "
                  f"jobs waited\n")
        for key, seconds in idle.items():
            out.write(f"#   {seconds:7.1f} slot-s {key}: {CAUSES[key]}\n")
        for i, (begun, ended, total) in sorted(intervals.items()):
            p = passes[i]
            causes = " ".join(f"{c}={s:.2f}" for c, s in total.most_common())
            free = " ".join(f"{a.rsplit('-', 1)[-1]}:{n}" for a, n in sorted(p.free.items()))
            kept = " ".join(f"{a.rsplit('-', 1)[-1]}<-{r}" for a, r in sorted(
                p.reserved.items()))
            asks = " ".join(f"{k}x{s}@{pr}" for k, s, pr in p.waiting)
            out.write(f"{begun - first:7.2f}-{ended - first:7.2f} s idle {causes} | free "
                      f"{free} | kept {kept or '-'} | waiting {asks or '-'}\n")


@dataclass
class Figures:
    name: str
    utilisation: float
    urgent_p50: float
    urgent_max: float
    lost: float
    makespan: float
    mean_wait: float
    preemptions: int
    slot_seconds: float = field(default=0.0)
    while_waiting: float = field(default=0.0)


async def play(client: Client, name: str, policy: PoolPolicy, jobs: list[Job],
               args: argparse.Namespace, experiment_base: int) -> Figures:
    pool = f"policy-{uuid.uuid4().hex[:6]}"
    agents = [f"{pool}-agent-{i}" for i in range(args.agents)]
    workers = [Worker(client, task_queue=agent_task_queue(a),
                      activities=[sim_train, sim_stop, sim_pause, Liveness(a).agent_liveness],
                      max_concurrent_activities=2 * args.slots + 4) for a in agents]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        for agent_id in agents:
            await client.start_workflow(
                "ResourcePoolWorkflow", PoolInput(name=pool, policy=policy),
                id=resource_pool_workflow_id(pool), task_queue=MASTER_TASK_QUEUE,
                start_signal="register_agent",
                start_signal_args=[AgentRegistration(agent_id, list(range(args.slots)),
                                                     uuid.uuid4().hex)])
        start = time.time()
        handles = []
        for job in jobs:
            delay = start + job.arrival - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            handles.append(await client.start_workflow(
                PolicyBenchJob.run,
                JobInput(pool, job, experiment_base + job.index, args.checkpoint_seconds,
                         args.restart_seconds),
                id=f"{pool}-job-{job.index}", task_queue=MASTER_TASK_QUEUE))
        times: list[JobTimes] = [await h.result() for h in handles]
    finally:
        for w in workers:
            await w.shutdown()
        await asyncio.gather(*tasks, return_exceptions=True)
    first = min(t.arrival for t in times)
    last = max(t.ended for t in times)
    capacity = args.agents * args.slots * (last - first)
    held = sum(t.held for t in times)
    urgent = [t.started - t.arrival for t in times if t.priority == URGENT] or [0.0]
    waits = [t.started - t.arrival for t in times]
    figures = Figures(name, held / capacity, statistics.median(urgent), max(urgent),
                      sum(t.lost for t in times), last - first, statistics.mean(waits),
                      sum(t.preemptions for t in times), held,
                      busy_while_waiting(times, args.agents * args.slots))
    if args.explain is not None:
        explain(times, PASSES.pop(pool, []), args.agents * args.slots, args.explain, name)
    print(f"{name:<17} utilisation {100 * figures.utilisation:5.1f}% (while jobs wait "
          f"{100 * figures.while_waiting:5.1f}%)  urgent wait p50 "
          f"{figures.urgent_p50:6.2f} s max {figures.urgent_max:6.2f} s  lost to preemption "
          f"{figures.lost:6.1f} slot-s ({figures.preemptions} preemptions)  makespan "
          f"{figures.makespan:6.1f} s  mean wait {figures.mean_wait:6.2f} s", flush=True)
    return figures


async def bench(args: argparse.Namespace, address: str) -> str:
    client = await Client.connect(address)
    jobs = trace(args.seed, args.jobs, args.span, args.slots)
    for job in jobs:
        job.work *= args.work_scale
    work = sum(j.work * j.slots for j in jobs)
    urgent = sum(j.priority == URGENT for j in jobs)
    print(f"trace seed {args.seed}: {len(jobs)} jobs ({urgent} urgent) over {args.span:g} s, "
          f"{work:.0f} slot-s of work on {args.agents} agents x {args.slots} slots "
          f"(offered load {work / (args.span * args.agents * args.slots):.2f})", flush=True)
    results = []
    async with Worker(client, task_queue=MASTER_TASK_QUEUE,
                      workflows=[ResourcePoolWorkflow, PolicyBenchJob],
                      activities=SchedulerActivities(client).all(),
                      workflow_runner=UnsandboxedWorkflowRunner(),
                      max_concurrent_workflow_tasks=100, max_concurrent_activities=200):
        for n, (name, policy) in enumerate(POLICIES.items()):
            results.append(await play(client, name, policy, jobs, args, 1000 * (n + 1)))
    before, after = results
    return (f"summary: utilisation while jobs wait {100 * before.while_waiting:.1f}% -> "
            f"{100 * after.while_waiting:.1f}% (overall {100 * before.utilisation:.1f}% -> "
            f"{100 * after.utilisation:.1f}%), urgent wait max {before.urgent_max:.2f} s -> "
            f"{after.urgent_max:.2f} s (p50 {before.urgent_p50:.2f} s -> "
            f"{after.urgent_p50:.2f} s), work lost to preemption {after.lost:.1f} slot-s of "
            f"{after.slot_seconds:.0f} slot-s, makespan {before.makespan:.1f} s -> "
            f"{after.makespan:.1f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--jobs", type=int, default=80)
    p.add_argument("--span", type=float, default=60.0,
                   help="seconds the trace's arrivals are spread over")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--checkpoint-seconds", type=float, default=0.5)
    p.add_argument("--restart-seconds", type=float, default=0.5)
    p.add_argument("--work-scale", type=float, default=1.0,
                   help="each job's work times this (the offered load)")
    p.add_argument("--explain", type=Path, default=None, metavar="FILE",
                   help="say why slots sat idle while jobs waited; each interval to FILE")
    p.add_argument("--temporal", default=None, help="a running Temporal (default: start one)")
    add_smoke_option(p, agents=1, slots=4, jobs=10, span=2.0, checkpoint_seconds=0.1,
                     restart_seconds=0.1, work_scale=3.0)
    args = parse_args(p)
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    if args.explain is not None:
        args.explain.write_text("")
        explain_pools()
    if args.temporal:
        print(asyncio.run(bench(args, args.temporal)))
        return
    with tempfile.TemporaryDirectory(prefix="epochal-bench-") as tmp, dev_server(
            Path(tmp)) as (address, _):
        print(asyncio.run(bench(args, address)))


if __name__ == "__main__":
    main()

"""Helpers for tests that run trials through a resource pool: fake agents and grant sinks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from agent_worker.liveness import Liveness
from common.temporal_names import MASTER_TASK_QUEUE, agent_task_queue, resource_pool_workflow_id
from tests.waiting import eventually, within
from wire.pools import (
    AgentRegistration,
    Allocation,
    PoolInput,
    Preemption,
    SlotRelease,
    SlotReply,
    SlotRequest,
)


async def register(
    client: Client,
    pool_name: str,
    agent_id: str,
    slots: int,
    *,
    boot_id: str | None = None,
    pool_input: PoolInput | None = None,
) -> str:
    """Register an agent with a pool (started if need be), as the master's API does."""
    boot = boot_id or uuid.uuid4().hex
    await client.start_workflow(
        "ResourcePoolWorkflow",
        pool_input or PoolInput(name=pool_name),
        id=resource_pool_workflow_id(pool_name),
        task_queue=MASTER_TASK_QUEUE,
        start_signal="register_agent",
        start_signal_args=[AgentRegistration(agent_id, list(range(slots)), boot)],
    )
    return boot


@asynccontextmanager
async def fake_agent(
    client: Client,
    pool_name: str,
    agent_id: str,
    slots: int,
    activities: Sequence[Callable[..., Any]] = (),
    *,
    pool_input: PoolInput | None = None,
) -> AsyncIterator[Worker]:
    """A Temporal worker on `agent.<id>` with the liveness activity (beating fast) and more."""
    liveness = Liveness(agent_id, beat=0.3)
    worker = Worker(
        client,
        task_queue=agent_task_queue(agent_id),
        activities=[liveness.agent_liveness, *activities],
        max_concurrent_activities=slots + 4,
        max_heartbeat_throttle_interval=timedelta(seconds=0.5),
        default_heartbeat_throttle_interval=timedelta(seconds=0.5),
        graceful_shutdown_timeout=timedelta(0),
    )
    task = asyncio.create_task(worker.run())
    try:
        await register(client, pool_name, agent_id, slots, pool_input=pool_input)
        yield worker
    finally:
        await worker.shutdown()
        await asyncio.gather(task, return_exceptions=True)


@workflow.defn(name="GrantSink")
class GrantSink:
    """Stands in for a trial: keeps the pool's `slots_granted` and `preempt` signals (queries
    `allocation`, `preemption`) until the test ends it."""

    def __init__(self) -> None:
        self._granted: Allocation | None = None
        self._preempted: Preemption | None = None

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def slots_granted(self, allocation: Allocation) -> None:
        self._granted = allocation

    @workflow.signal
    def preempt(self, preemption: Preemption) -> None:
        self._preempted = preemption

    @workflow.query
    def allocation(self) -> Allocation | None:
        return self._granted

    @workflow.query
    def preemption(self) -> Preemption | None:
        return self._preempted


async def start_sink(client: Client, task_queue: str) -> WorkflowHandle[Any, None]:
    return await client.start_workflow(
        GrantSink.run, id=f"sink-{uuid.uuid4().hex[:10]}", task_queue=task_queue
    )


class Pool:
    """One test's pool, with helpers to ask for and give back slots."""

    def __init__(self, client: Client, sink_queue: str) -> None:
        self.client = client
        self.name = f"test-{uuid.uuid4().hex[:8]}"
        self.sink_queue = sink_queue
        self.handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(
            resource_pool_workflow_id(self.name))
        self.sinks: dict[str, WorkflowHandle[Any, Allocation]] = {}
        self._n = 0

    def agent(self, name: str) -> str:
        """An agent id of this test only (other tests' pools still watch theirs)."""
        return f"{self.name}-{name}"

    async def request(self, experiment_id: int, slots: int = 1, priority: int = 42,
                      max_slots: int | None = None, key: str | None = None,
                      **who: Any) -> SlotReply:
        """Ask for slots; `who`: the request's user_id, workspace_id, workspace_max_slots or
        task, which the master's activity fills in."""
        self._n += 1
        key = key or f"{experiment_id}.{self._n}.1"
        if key not in self.sinks:
            self.sinks[key] = await start_sink(self.client, self.sink_queue)
        request = SlotRequest(allocation_id=key, workflow_id=self.sinks[key].id,
                              experiment_id=experiment_id, trial_id=self._n, slots=slots,
                              priority=priority, max_slots=max_slots, **who)
        reply: SlotReply = await self.handle.execute_update(
            "request_slots", request, id=f"{key}-{uuid.uuid4().hex[:6]}", result_type=SlotReply)
        return reply

    async def release(self, key: str) -> bool:
        held: bool = await self.handle.execute_update(
            "release_slots", SlotRelease(key), result_type=bool)
        return held

    async def describe(self) -> dict[str, Any]:
        answer: dict[str, Any] = await self.handle.query("describe")
        return answer

    async def granted(self, key: str, timeout: float = 30) -> Allocation:
        """The grant a waiting request got by signal."""
        granted: Allocation = await self._told(key, GrantSink.allocation, "grant", timeout)
        return granted

    async def preempted(self, key: str, timeout: float = 30) -> Preemption:
        """The preemption the holder of `key` was sent."""
        said: Preemption = await self._told(key, GrantSink.preemption, "preempt", timeout)
        return said

    async def _told(self, key: str, query: Any, verb: str, timeout: float) -> Any:
        """What the sink holding `key` answers to `query`, once it is not None."""
        return await within(
            eventually(lambda: self.sinks[key].query(query), timeout, f"the pool to {verb} {key}"),
            timeout + 5, f"the pool to {verb} {key}", explain=self.describe)

    async def was_preempted(self, key: str) -> bool:
        return await self.sinks[key].query(GrantSink.preemption) is not None

    async def is_waiting(self, key: str) -> bool:
        return any(r["allocation_id"] == key for r in (await self.describe())["queue"])

    async def agent_alive(self, agent_id: str, alive: bool) -> bool:
        agents = {a["id"]: a for a in (await self.describe())["agents"]}
        return agent_id in agents and agents[agent_id]["alive"] is alive

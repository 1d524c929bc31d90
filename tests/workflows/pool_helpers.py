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
from wire.pools import AgentRegistration, Allocation, PoolInput


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
    """Stands in for a trial: waits for the pool's `slots_granted` signal and returns it."""

    def __init__(self) -> None:
        self._granted: Allocation | None = None

    @workflow.run
    async def run(self) -> Allocation:
        await workflow.wait_condition(lambda: self._granted is not None)
        assert self._granted is not None
        return self._granted

    @workflow.signal
    def slots_granted(self, allocation: Allocation) -> None:
        self._granted = allocation


async def start_sink(client: Client, task_queue: str) -> WorkflowHandle[Any, Allocation]:
    return await client.start_workflow(
        GrantSink.run, id=f"sink-{uuid.uuid4().hex[:10]}", task_queue=task_queue
    )

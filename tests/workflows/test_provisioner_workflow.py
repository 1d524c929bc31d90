"""ProvisionerWorkflow on the real dev server, its activities scripted: a provider kept in memory
whose instances register their agents at once (or never: a hung boot), and a pool whose queue
and agents the test sets. The workflow launches for the queue, replaces the hung instance,
drains then terminates idle agents, and ends when the pool loses its provider."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from common.temporal_names import (
    PROVISIONER_LAUNCH,
    PROVISIONER_OBSERVE,
    PROVISIONER_SET_ENABLED,
    PROVISIONER_TERMINATE,
)
from tests.replay.recording import save, tag
from wire.provisioning import (
    AgentView,
    EnableRequest,
    Instance,
    LaunchRequest,
    Limits,
    Observation,
    ProvisionerInput,
    TerminateRequest,
)
from workflows.provisioner import ProvisionerWorkflow

LIMITS = Limits(min_instances=0, max_instances=3, max_idle_agent_period=0.5,
                max_agent_starting_period=1.0, slots_per_instance=1, interval=0.2)


class ScriptedPool:
    """The provider's instances and the pool's agents and queue, as the activities see them."""

    def __init__(self) -> None:
        self.instances: dict[str, Instance] = {}
        self.agents: dict[str, AgentView] = {}
        self.queue: list[int] = []
        self.hang_next = 0  # launches whose agent never registers
        self.provided = True
        self.log: list[str] = []
        self._n = 0

    @activity.defn(name=PROVISIONER_OBSERVE)
    async def observe(self, pool: str) -> Observation | None:
        if not self.provided:
            return None
        return Observation(LIMITS, list(self.instances.values()),
                           [AgentView(a.agent_id, a.alive, a.enabled, a.busy)
                            for a in self.agents.values()], list(self.queue))

    @activity.defn(name=PROVISIONER_LAUNCH)
    async def launch(self, request: LaunchRequest) -> list[str]:
        launched = []
        for _ in range(request.count):
            self._n += 1
            agent_id = f"a{self._n}"
            self.instances[f"i{self._n}"] = Instance(f"i{self._n}", agent_id,
                                                     activity.info().started_time.timestamp())
            if self.hang_next:
                self.hang_next -= 1
            else:
                self.agents[agent_id] = AgentView(agent_id, True, True, False)
            launched.append(agent_id)
        self.log.append(f"launch {','.join(launched)}")
        return launched

    @activity.defn(name=PROVISIONER_TERMINATE)
    async def terminate(self, request: TerminateRequest) -> None:
        for instance_id in request.instance_ids:
            instance = self.instances.pop(instance_id)
            if instance.agent_id in self.agents:
                self.agents[instance.agent_id].alive = False
        self.log.append(f"terminate {','.join(request.instance_ids)}: {request.reason}")

    @activity.defn(name=PROVISIONER_SET_ENABLED)
    async def set_enabled(self, request: EnableRequest) -> None:
        for agent_id in request.agent_ids:
            self.agents[agent_id].enabled = request.enabled
        self.log.append(f"{'enable' if request.enabled else 'drain'} {','.join(request.agent_ids)}")


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        value = check()
        if value if isinstance(value, bool) else await value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_launches_for_the_queue_replaces_a_hung_boot_and_retires_idle_agents(
    temporal_client: Client,
) -> None:
    pool = ScriptedPool()
    queue = f"provisioner-test-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[ProvisionerWorkflow],
                      activities=[pool.observe, pool.launch, pool.terminate, pool.set_enabled]):
        pool.hang_next = 1
        pool.queue = [1, 1, 1, 1]
        handle = await temporal_client.start_workflow(
            ProvisionerWorkflow.run, ProvisionerInput(pool="auto"),
            id=f"provisioner-{queue}", task_queue=queue)
        await until(lambda: len(pool.instances) == 3)
        assert pool.log[0] == "launch a1,a2,a3"
        # a1 never registers: terminated after max_agent_starting_period, then replaced.
        await until(lambda: any(line.startswith("terminate i1") for line in pool.log))
        assert "terminate i1: its agent did not register within 1 s" in pool.log
        await until(lambda: "a4" in pool.agents)
        assert len(pool.instances) == 3  # never more than max_instances

        # The queue is served; the agents run trials, then go idle.
        pool.queue = []
        for agent in pool.agents.values():
            agent.busy = True
        await asyncio.sleep(1.0)
        assert not any(line.startswith("drain") for line in pool.log)  # busy: kept
        for agent in pool.agents.values():
            agent.busy = False
        await until(lambda: not pool.instances)
        drained = [line for line in pool.log if line.startswith("drain")]
        assert drained and all(not pool.agents[a].enabled
                               for line in drained for a in line[6:].split(","))

        pool.provided = False  # the master's config no longer has this pool's provider
        await handle.result()
    if tag() is not None:
        save("provisioner", await handle.fetch_history())

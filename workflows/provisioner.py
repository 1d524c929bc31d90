"""ProvisionerWorkflow (`provisioner-<pool>`): starts agents when a pool's queue needs slots and
retires them when idle, as Determined's provisioner does, through a provider (processes, Docker
containers, EC2 instances: providers/).

Every `interval` seconds it observes the pool (its instances from the provider; its agents and
queue from the pool's scheduler) and acts on `plan()`:

- instances that never registered an agent within `max_agent_starting_period` are terminated
  (the demand they were for launches their replacements);
- queued slots not covered by starting instances launch new ones, up to `max_instances`, and
  at least `min_instances` run;
- an agent idle for `max_idle_agent_period` is first disabled in the pool (it gets no new
  trials), then terminated once the pool shows it idle and disabled: never one that runs a
  trial. Demand that returns meanwhile re-enables it instead of launching another.

The provider's list is the truth about instances; the workflow keeps only when each agent went
idle and which ones it is retiring, and continues as new before its history grows long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from common.temporal_names import (
        PROVISIONER_LAUNCH,
        PROVISIONER_OBSERVE,
        PROVISIONER_SET_ENABLED,
        PROVISIONER_TERMINATE,
        PROVISIONER_WORKFLOW,
    )
    from wire.provisioning import (
        EnableRequest,
        LaunchRequest,
        Limits,
        Observation,
        ProvisionerInput,
        ProvisionerMemory,
        TerminateRequest,
    )

ROUNDS_PER_RUN = 200  # continue as new after this many rounds (about 5 events each)
ACTIVITY_TIMEOUT = timedelta(minutes=5)  # a cloud API may be slow to start instances
RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=5)


@dataclass
class Plan:
    launch: int = 0
    terminate: dict[str, str] = field(default_factory=dict)  # instance id -> reason
    disable: list[str] = field(default_factory=list)  # agent ids to retire
    enable: list[str] = field(default_factory=list)  # retiring agents wanted again


def plan(now: float, obs: Observation, memory: ProvisionerMemory) -> Plan:
    """This round's actions; updates `memory` (idle times, agents being retired)."""
    limits: Limits = obs.limits
    agents = {a.agent_id: a for a in obs.agents}
    result = Plan()
    registered, starting = [], []
    for instance in obs.instances:
        agent = agents.get(instance.agent_id)
        if agent is not None and agent.alive:
            registered.append(instance)
        elif agent is not None or now - instance.launched_at > limits.max_agent_starting_period:
            # Its agent was lost (or never came): the instance is of no use any more.
            why = ("its agent was lost" if agent is not None else
                   f"its agent did not register within {limits.max_agent_starting_period:g} s")
            result.terminate[instance.instance_id] = why
        else:
            starting.append(instance)

    demand = queued = sum(obs.queued_slots)
    retiring = [a for a in memory.retiring if a in agents and agents[a].alive]
    if queued and retiring:  # demand is back: keep the agents we were about to retire
        result.enable = retiring
        queued = max(0, queued - limits.slots_per_instance * len(retiring))
        retiring = []
    running = len(registered) + len(starting)
    needed = math.ceil(max(0, queued - len(starting) * limits.slots_per_instance)
                       / max(1, limits.slots_per_instance))
    result.launch = max(0, min(needed, limits.max_instances - running),
                        limits.min_instances - running)

    # Idle agents: disabled first, terminated when the pool shows them idle and disabled.
    live = {i.agent_id: i for i in registered}
    for agent_id in list(memory.idle_since):
        if agent_id not in live or agents[agent_id].busy:
            memory.idle_since.pop(agent_id)
    for agent_id in live:
        if not agents[agent_id].busy:
            memory.idle_since.setdefault(agent_id, now)
    for agent_id in retiring:
        agent = agents[agent_id]
        if not agent.busy and not agent.enabled:
            result.terminate[live[agent_id].instance_id] = (
                f"idle for {limits.max_idle_agent_period:g} s")
    spare = running - len(retiring) - limits.min_instances
    if not demand:
        for agent_id, since in sorted(memory.idle_since.items(), key=lambda kv: kv[1]):
            if spare <= 0:
                break
            if agent_id not in retiring and now - since >= limits.max_idle_agent_period:
                result.disable.append(agent_id)
                spare -= 1
    terminated_agents = {i.agent_id for i in obs.instances
                         if i.instance_id in result.terminate}
    memory.retiring = [a for a in retiring + result.disable if a not in terminated_agents]
    return result


@workflow.defn(name=PROVISIONER_WORKFLOW)
class ProvisionerWorkflow:
    @workflow.run
    async def run(self, inp: ProvisionerInput) -> None:
        memory = inp.memory or ProvisionerMemory()
        for _ in range(ROUNDS_PER_RUN):
            obs: Observation | None = await workflow.execute_activity(
                PROVISIONER_OBSERVE, inp.pool, result_type=Observation,
                start_to_close_timeout=ACTIVITY_TIMEOUT, retry_policy=RETRY)
            if obs is None:
                workflow.logger.info("pool %s has no provider any more; provisioner ends",
                                     inp.pool)
                return
            actions = plan(workflow.now().timestamp(), obs, memory)
            await self._act(inp.pool, actions, memory)
            if workflow.info().is_continue_as_new_suggested():
                break
            await workflow.sleep(timedelta(seconds=obs.limits.interval))
        workflow.continue_as_new(ProvisionerInput(pool=inp.pool, memory=memory))

    async def _act(self, pool: str, actions: Plan, memory: ProvisionerMemory) -> None:
        for agent_ids, enabled in ((actions.enable, True), (actions.disable, False)):
            if agent_ids:
                await workflow.execute_activity(
                    PROVISIONER_SET_ENABLED, EnableRequest(pool, agent_ids, enabled),
                    start_to_close_timeout=ACTIVITY_TIMEOUT, retry_policy=RETRY)
        for reason in sorted(set(actions.terminate.values())):
            ids = sorted(i for i, r in actions.terminate.items() if r == reason)
            await workflow.execute_activity(
                PROVISIONER_TERMINATE, TerminateRequest(pool, ids, reason),
                start_to_close_timeout=ACTIVITY_TIMEOUT, retry_policy=RETRY)
            memory.terminated += len(ids)
        if actions.launch:
            await workflow.execute_activity(
                PROVISIONER_LAUNCH, LaunchRequest(pool, actions.launch),
                start_to_close_timeout=ACTIVITY_TIMEOUT, retry_policy=RETRY)
            memory.launched += actions.launch

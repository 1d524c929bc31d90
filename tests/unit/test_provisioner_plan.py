"""The provisioner's decisions (workflows/provisioner.py `plan`), round by round."""

from __future__ import annotations

from wire.provisioning import (
    AgentView,
    Instance,
    Limits,
    Observation,
    ProvisionerMemory,
)
from workflows.provisioner import plan

LIMITS = Limits(min_instances=0, max_instances=3, max_idle_agent_period=60,
                max_agent_starting_period=120, slots_per_instance=1)


def obs(instances: list[Instance], agents: list[AgentView], queued: list[int],
        limits: Limits = LIMITS) -> Observation:
    return Observation(limits, instances, agents, queued)


def agent(agent_id: str, *, busy: bool = False, enabled: bool = True,
          alive: bool = True) -> AgentView:
    return AgentView(agent_id, alive, enabled, busy)


def test_a_queue_launches_up_to_max_instances_counting_those_starting() -> None:
    memory = ProvisionerMemory()
    assert plan(0, obs([], [], [1] * 6), memory).launch == 3
    starting = [Instance(f"i{n}", f"a{n}", 0) for n in range(2)]
    assert plan(10, obs(starting, [], [1] * 6), memory).launch == 1
    # Two starting instances cover two queued slots: nothing more to launch.
    assert plan(10, obs(starting, [], [1, 1]), memory).launch == 0


def test_slots_per_instance_divides_the_demand_and_min_instances_always_run() -> None:
    limits = Limits(min_instances=2, max_instances=10, slots_per_instance=4)
    assert plan(0, obs([], [], [8, 1]), ProvisionerMemory()).launch == 3
    assert plan(0, obs([], [], [], limits), ProvisionerMemory()).launch == 2
    assert plan(0, obs([], [], [9], limits), ProvisionerMemory()).launch == 3


def test_an_agent_that_never_registers_is_terminated_and_its_demand_relaunched() -> None:
    stuck = Instance("i1", "a1", 0)
    actions = plan(121, obs([stuck], [], [1]), ProvisionerMemory())
    assert actions.terminate == {"i1": "its agent did not register within 120 s"}
    assert actions.launch == 1
    lost = plan(5, obs([Instance("i2", "a2", 0)], [agent("a2", alive=False)], []),
                ProvisionerMemory())
    assert lost.terminate == {"i2": "its agent was lost"}


def test_an_idle_agent_is_drained_then_terminated_never_while_busy() -> None:
    memory = ProvisionerMemory()
    instance = Instance("i1", "a1", 0)
    assert plan(100, obs([instance], [agent("a1", busy=True)], []), memory).disable == []
    assert plan(110, obs([instance], [agent("a1")], []), memory).disable == []  # idle from 110
    drained = plan(170, obs([instance], [agent("a1")], []), memory)
    assert drained.disable == ["a1"] and drained.terminate == {}
    assert memory.retiring == ["a1"]
    # A trial granted before the drain took effect: wait for it.
    assert plan(171, obs([instance], [agent("a1", busy=True, enabled=False)], []),
                memory).terminate == {}
    done = plan(172, obs([instance], [agent("a1", enabled=False)], []), memory)
    assert done.terminate == {"i1": "idle for 60 s"}
    assert memory.retiring == []


def test_demand_that_returns_keeps_the_agents_being_retired() -> None:
    memory = ProvisionerMemory(idle_since={"a1": 0}, retiring=["a1"])
    instance = Instance("i1", "a1", 0)
    actions = plan(100, obs([instance], [agent("a1", enabled=False)], [1]), memory)
    assert actions.enable == ["a1"] and actions.launch == 0 and actions.terminate == {}
    assert memory.retiring == []


def test_min_instances_are_never_retired() -> None:
    limits = Limits(min_instances=1, max_instances=3, max_idle_agent_period=10)
    memory = ProvisionerMemory()
    instances = [Instance("i1", "a1", 0), Instance("i2", "a2", 0)]
    agents = [agent("a1"), agent("a2")]
    plan(0, obs(instances, agents, [], limits), memory)
    assert plan(20, obs(instances, agents, [], limits), memory).disable == ["a1"]
    assert plan(40, obs(instances, agents, [], limits), memory).disable == []

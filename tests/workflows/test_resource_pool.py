"""ResourcePoolWorkflow on the real dev server: priorities, fair share, max_slots, too-big
requests, agents lost and disabled, deduplication, and continue-as-new with its state kept.

Requests go straight to the pool as updates (as the master's `request_slots` activity sends
them); `GrantSink` workflows stand in for trials waiting for `slots_granted`.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)

from common.temporal_names import MASTER_TASK_QUEUE
from tests.replay.recording import save, tag
from tests.waiting import eventually
from tests.workflows.pool_helpers import Pool, fake_agent, register
from wire.pools import (
    AgentEnabled,
    AgentLost,
    ExperimentResources,
    PoolInput,
    SlotRequest,
)


async def test_lower_priority_number_runs_first(temporal_client: Client, rp: Pool) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 1):
        first = await rp.request(1)
        assert first.status == "granted" and first.allocation is not None
        assert first.allocation.task_queue == f"agent.{rp.agent('a1')}"
        low = await rp.request(2, priority=50)
        high = await rp.request(3, priority=10)
        assert (low.status, high.status) == ("queued", "queued")
        assert (low.position, high.position) == (0, 0)  # each first when it arrived
        assert [r["experiment_id"] for r in (await rp.describe())["queue"]] == [3, 2]
        await rp.release(first.allocation.allocation_id)
        got = await rp.granted("3.3.1")
        assert got.agent_id == rp.agent("a1") and got.slot_ids == [0]
        assert await rp.is_waiting("2.2.1")


async def test_equal_priority_shares_fairly_between_experiments(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2):
        a = await rp.request(1)
        b = await rp.request(1)
        assert a.status == b.status == "granted"
        older = await rp.request(1)  # experiment 1 already holds 2 slots
        newer = await rp.request(2)  # experiment 2 holds none: it goes first
        assert older.status == newer.status == "queued"
        assert [r["experiment_id"] for r in (await rp.describe())["queue"]] == [2, 1]
        await rp.release("1.1.1")
        assert (await rp.granted("2.4.1")).slot_ids == [0]
        await rp.release("1.2.1")
        assert (await rp.granted("1.3.1")).slot_ids == [1]


async def test_max_slots_caps_an_experiment_but_not_the_others(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 4):
        assert (await rp.request(1, max_slots=2)).status == "granted"
        assert (await rp.request(1, max_slots=2)).status == "granted"
        assert (await rp.request(1, max_slots=2)).status == "queued"
        assert (await rp.request(2)).status == "granted"  # later, but experiment 2 is not capped
        await rp.release("1.1.1")
        assert (await rp.granted("1.3.1")).agent_id == rp.agent("a1")


async def test_changed_experiment_resources_reorder_the_queue_and_survive_continue_as_new(
    temporal_client: Client, rp: Pool
) -> None:
    """`det experiment set priority|max-slots|weight`: waiting and later requests follow."""
    small = PoolInput(name=rp.name, max_history_length=80)
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2, pool_input=small):
        assert (await rp.request(1)).status == "granted"
        assert (await rp.request(2)).status == "granted"
        for experiment in (3, 4):
            assert (await rp.request(experiment)).status == "queued"
        assert [r["experiment_id"] for r in (await rp.describe())["queue"]] == [3, 4]
        await rp.handle.signal("set_experiment_resources", ExperimentResources(4, priority=10))
        await eventually(lambda: _queue_is(rp, [4, 3]), 20, "the queue [4, 3]")
        assert [r["priority"] for r in (await rp.describe())["queue"]] == [10, 42]
        # max_slots 0 holds experiment 4 back: a freed slot goes to experiment 3.
        await rp.handle.signal("set_experiment_resources", ExperimentResources(4, max_slots=0))
        await rp.release("2.2.1")
        assert (await rp.granted("3.3.1")).agent_id == rp.agent("a1")
        # A later request of experiment 4 carries the override: too big for it, it fails at once.
        with pytest.raises(WorkflowUpdateFailedError):
            await rp.request(4)
        await rp.handle.signal("set_experiment_resources", ExperimentResources(4, max_slots=4))
        for i in range(6):  # churn until the pool continues as new with its overrides
            await rp.request(9, key=f"9.{i}.1")
            await rp.release(f"9.{i}.1")
        await eventually(lambda: _generation_at_least(rp, 1), 20, "a continue-as-new")
        later = await rp.request(4, key="4.99.1")
        assert later.status == "queued"
        queue = (await rp.describe())["queue"]
        assert [(r["experiment_id"], r["priority"], r["max_slots"]) for r in queue] == [
            (4, 10, 4), (4, 10, 4)]
        await rp.release("1.1.1")
        assert (await rp.granted("4.4.1")).agent_id == rp.agent("a1")


async def test_weight_scales_fair_share(temporal_client: Client, rp: Pool) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 3):
        for _ in range(2):
            assert (await rp.request(1)).status == "granted"
        assert (await rp.request(2)).status == "granted"
        assert (await rp.request(1)).status == "queued"  # 1 holds 2 slots, 2 holds 1
        assert (await rp.request(2)).status == "queued"
        assert [r["experiment_id"] for r in (await rp.describe())["queue"]] == [2, 1]
        # Weight 4: experiment 1's two slots count as half a slot, less than 2's one.
        await rp.handle.signal("set_experiment_resources", ExperimentResources(1, weight=4.0))
        await eventually(lambda: _queue_is(rp, [1, 2]), 20, "the queue [1, 2]")


async def _queue_is(pool: Pool, experiments: list[int]) -> bool:
    return [r["experiment_id"] for r in (await pool.describe())["queue"]] == experiments


async def test_a_request_no_agent_size_can_make_up_fails_clearly(
    temporal_client: Client, rp: Pool
) -> None:
    await register(temporal_client, rp.name, rp.agent("small"), 2)
    await register(temporal_client, rp.name, rp.agent("big"), 4)
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await rp.request(1, slots=7)  # more than any agent, and no size of 2 or 4 makes 7
    message = str(caught.value.cause)
    assert "7 slots" in message and rp.name in message and rp.agent("big") in message
    assert "multiple" in message and "2, 4" in message
    # A request that fits the big agent only waits or runs; it never fails.
    assert (await rp.request(1, slots=4)).status == "granted"
    # The API asks the same before it stores an experiment (query `check_request`).
    def check(slots: int) -> SlotRequest:
        return SlotRequest(allocation_id="", workflow_id="", experiment_id=0, trial_id=0,
                           slots=slots)

    said = await rp.handle.query("check_request", check(7))
    assert "each trial needs 7 slots" in said and "multiple of no agent size" in said
    assert await rp.handle.query("check_request", check(8)) is None  # it would wait, not fail


async def test_a_trial_larger_than_any_agent_gets_whole_agents_at_once(
    temporal_client: Client, rp: Pool
) -> None:
    async with (fake_agent(temporal_client, rp.name, rp.agent("a1"), 2),
                fake_agent(temporal_client, rp.name, rp.agent("a2"), 2),
                fake_agent(temporal_client, rp.name, rp.agent("a3"), 2)):
        small = await rp.request(1, slots=1)
        assert small.status == "granted" and small.allocation is not None
        big = await rp.request(2, slots=4)
        # Two whole idle agents, the chief first; never a part of the busy one.
        assert big.status == "granted" and big.allocation is not None
        parts = big.allocation.parts
        assert [len(p.slot_ids) for p in parts] == [2, 2]
        assert small.allocation.agent_id not in {p.agent_id for p in parts}
        assert big.allocation.agent_id == parts[0].agent_id
        assert big.allocation.slot_ids == parts[0].slot_ids
        # All or nothing: a second 4-slot trial waits for two whole agents, holding none.
        second = await rp.request(3, slots=4)
        assert second.status == "queued"
        busy = {a["id"]: a["allocations"] for a in (await rp.describe())["agents"]}
        assert all(len(allocs) == 1 for allocs in busy.values())
        await rp.release(small.allocation.allocation_id)
        assert await rp.is_waiting("3.3.1")  # one whole idle agent is not two
        await rp.release(big.allocation.allocation_id)
        got = await rp.granted("3.3.1")
        assert sorted(len(p.slot_ids) for p in got.parts) == [2, 2]


async def test_a_trial_larger_than_the_pool_waits_without_holding_up_others(
    temporal_client: Client, rp: Pool
) -> None:
    async with (fake_agent(temporal_client, rp.name, rp.agent("a1"), 2),
                fake_agent(temporal_client, rp.name, rp.agent("a2"), 2)):
        big = await rp.request(1, slots=6)  # 3 agents of 2: the pool has 2
        assert big.status == "queued"
        queue = (await rp.describe())["queue"]
        assert "needs 6 slots" in queue[0]["waiting"] and "2 x 2" in queue[0]["waiting"]
        # Smaller requests behind it run meanwhile.
        assert (await rp.request(2, slots=2)).status == "granted"
        assert (await rp.request(3, slots=2)).status == "granted"
        await rp.release("2.2.1")
        await rp.release("3.3.1")
        async with fake_agent(temporal_client, rp.name, rp.agent("a3"), 2):
            got = await rp.granted("1.1.1")
            assert sorted(p.agent_id for p in got.parts) == [
                rp.agent("a1"), rp.agent("a2"), rp.agent("a3")]


async def test_a_pool_without_agents_waits_for_one(temporal_client: Client, rp: Pool) -> None:
    await temporal_client.start_workflow(
        "ResourcePoolWorkflow", PoolInput(name=rp.name), id=rp.handle.id,
        task_queue=MASTER_TASK_QUEUE)
    assert (await rp.request(1, slots=16)).status == "queued"
    async with fake_agent(temporal_client, rp.name, rp.agent("late"), 16):
        assert (await rp.granted("1.1.1")).agent_id == rp.agent("late")


async def test_a_retried_request_is_granted_once(temporal_client: Client, rp: Pool) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2):
        first = await rp.request(1, key="1.1.1")
        again = await rp.request(1, key="1.1.1")
        assert first.allocation == again.allocation
        assert len((await rp.describe())["allocations"]) == 1
        assert await rp.release("1.1.1") is True
        assert await rp.release("1.1.1") is False
        with pytest.raises(WorkflowUpdateFailedError):
            await rp.request(1, key="1.1.1")  # released ids are never granted again


async def test_a_disabled_agent_gets_no_new_work(temporal_client: Client, rp: Pool) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 1), \
            fake_agent(temporal_client, rp.name, rp.agent("a2"), 1):
        await rp.handle.signal("set_agent_enabled", AgentEnabled(rp.agent("a1"), False))
        first = await rp.request(1)
        assert first.allocation is not None and first.allocation.agent_id == rp.agent("a2")
        assert (await rp.request(1)).status == "queued"
        await rp.handle.signal("set_agent_enabled", AgentEnabled(rp.agent("a1"), True))
        assert (await rp.granted("1.2.1")).agent_id == rp.agent("a1")


async def test_a_lost_agent_frees_its_slots(temporal_client: Client, rp: Pool) -> None:
    doomed = rp.agent("doomed")
    fast = PoolInput(name=rp.name, liveness_timeout_seconds=2)
    async with fake_agent(temporal_client, rp.name, doomed, 1, pool_input=fast):
        reply = await rp.request(1)
        assert reply.allocation is not None and reply.allocation.agent_id == doomed
    # The agent's worker is gone: its liveness activity ends, the pool frees its slots.
    await eventually(lambda: rp.agent_alive(doomed, False), 20, "the agent to be dead")
    described = await rp.describe()
    assert described["allocations"] == []
    assert described["agents"][0]["lostReason"]
    assert (await rp.request(2)).status == "queued"  # nothing alive to run it
    async with fake_agent(temporal_client, rp.name, doomed, 1, pool_input=fast):
        assert (await rp.granted("2.2.1")).agent_id == doomed  # back after a restart
        await rp.handle.signal("agent_lost", AgentLost(doomed, "stale-boot"))
        assert await rp.agent_alive(doomed, True)  # a stale boot's loss is ignored


async def test_continue_as_new_keeps_agents_allocations_and_queue(
    temporal_client: Client, rp: Pool
) -> None:
    small = PoolInput(name=rp.name, max_history_length=60)
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2, pool_input=small):
        for experiment in (1, 2, 3, 4, 5, 6):
            await rp.request(experiment)
        for i in range(6):  # churn: requests withdrawn while queued grow the history
            await rp.request(8, key=f"8.{i}.1")
            await rp.release(f"8.{i}.1")
        await eventually(lambda: _generation_at_least(rp, 1), 20, "a continue-as-new")
        described = await rp.describe()
        assert {a["id"] for a in described["agents"]} == {rp.agent("a1")}
        assert len(described["allocations"]) == 2
        assert [r["experiment_id"] for r in described["queue"]] == [3, 4, 5, 6]
        # The state came along: a retried request is still deduplicated in the new run.
        again = await rp.request(2, key="2.2.1")
        assert again.status == "granted" and again.allocation is not None
        await rp.release("2.2.1")
        assert (await rp.granted("3.3.1")).agent_id == rp.agent("a1")
        await asyncio.sleep(1)  # liveness runs again in the new run: the agent stays alive
        assert await rp.agent_alive(rp.agent("a1"), True)
    if tag() is not None:  # the run that continued as new
        async for run in temporal_client.list_workflows(f"WorkflowId = '{rp.handle.id}'"):
            if run.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                handle = temporal_client.get_workflow_handle(rp.handle.id, run_id=run.run_id)
                save("pool-continue-as-new", await handle.fetch_history())


async def _generation_at_least(pool: Pool, n: int) -> bool:
    return int((await pool.describe())["generation"]) >= n


async def test_a_trial_too_big_for_the_pool_ends_in_error_naming_pool_and_agent(
    temporal_client: Client, rp: Pool, pool: asyncpg.Pool
) -> None:
    from tests.workflows.test_experiment_workflow import ended, make_config, start_experiment

    config = make_config(rp.name)
    config["resources"]["slots_per_trial"] = 12  # not a multiple of the agent's 8
    async with fake_agent(temporal_client, rp.name, rp.agent("small"), 8):
        experiment_id, handle = await start_experiment(temporal_client, pool, config)
        assert await ended(handle, 60) == "ERROR"
    logs = await pool.fetch(
        "SELECT l.log FROM task_logs l JOIN trials t ON t.id = l.trial_id"
        " WHERE t.experiment_id = $1", experiment_id)
    assert logs and all("cannot schedule the trial" in r["log"] and rp.name in r["log"]
                        and rp.agent("small") in r["log"] for r in logs)


async def test_a_trial_larger_than_the_pool_says_in_its_logs_that_it_waits(
    temporal_client: Client, rp: Pool, pool: asyncpg.Pool
) -> None:
    from tests.workflows.test_experiment_workflow import make_config, start_experiment

    config = make_config(rp.name)
    config["resources"]["slots_per_trial"] = 16  # two agents of 8; the pool has one
    async with fake_agent(temporal_client, rp.name, rp.agent("one"), 8):
        experiment_id, handle = await start_experiment(temporal_client, pool, config)

        async def told() -> bool:
            logs = await pool.fetch(
                "SELECT l.log FROM task_logs l JOIN trials t ON t.id = l.trial_id"
                " WHERE t.experiment_id = $1", experiment_id)
            return any("needs 16 slots" in r["log"] and "1 x 8" in r["log"]
                       and "waits until more agents join" in r["log"] for r in logs)

        await eventually(told, 20, "the trial's log to say why it waits")
        await handle.cancel()

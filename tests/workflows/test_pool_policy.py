"""The shared cluster's scheduling policy on the real dev server (issue 38): preemption by
priority, backfilling beside a reserved request, fair share across users and workspaces, a
workspace's slot cap, disabled slots and moved jobs.

`GrantSink` workflows stand in for trials: they keep the pool's grants and preemptions, and the
test gives slots back as a trial would once it has checkpointed.
"""

from __future__ import annotations

from temporalio.client import Client

from tests.replay.recording import save
from tests.waiting import eventually
from tests.workflows.pool_helpers import Pool, fake_agent
from wire.pools import MoveJob, PoolInput, PoolPolicy, SlotEnabled


async def _queue(pool: Pool) -> list[int]:
    return [r["experiment_id"] for r in (await pool.describe())["queue"]]


async def _queue_is(pool: Pool, experiments: list[int]) -> bool:
    return await _queue(pool) == experiments


async def test_a_higher_priority_request_preempts_the_newest_lowest_priority_run(
    temporal_client: Client, rp: Pool
) -> None:
    policy = PoolInput(name=rp.name, policy=PoolPolicy(preemption=True,
                                                       preemption_timeout_seconds=7))
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2, pool_input=policy):
        assert (await rp.request(1, priority=42)).status == "granted"  # 1.1.1
        assert (await rp.request(2, priority=50)).status == "granted"  # 2.2.1
        urgent = await rp.request(3, priority=1)
        assert urgent.status == "queued"
        told = await rp.preempted("2.2.1")  # the lowest priority goes, not the older 42
        assert told.grace_seconds == 7
        assert "priority 1" in told.reason and "experiment 3" in told.reason
        assert (await rp.describe())["preempting"] == ["2.2.1"]
        assert not await rp.was_preempted("1.1.1")
        # Its slot is kept for the urgent request: a later equal-priority one does not take it.
        assert (await rp.request(4, priority=50)).status == "queued"
        await rp.release("2.2.1")  # the trial checkpointed and gave it back
        assert (await rp.granted("3.3.1")).slot_ids == [1]
        assert (await rp.describe())["preempting"] == []
        assert not await rp.was_preempted("1.1.1")  # one victim was enough
    save("pool-preemption", await rp.handle.fetch_history())


async def test_equal_priority_tasks_and_a_pool_without_preemption_are_not_preempted(
    temporal_client: Client, rp: Pool
) -> None:
    preempts = PoolInput(name=rp.name, policy=PoolPolicy(preemption=True))
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2, pool_input=preempts):
        assert (await rp.request(1)).status == "granted"
        assert (await rp.request(0, task=True)).status == "granted"  # a notebook, say
        assert (await rp.request(2)).status == "queued"  # equal priority: it waits
        assert (await rp.request(3, priority=1)).status == "queued"
        await eventually(lambda: _queue_is(rp, [3, 2]), 10, "the queue [3, 2]")
        told = await rp.preempted("1.1.1")  # the trial, never the task
        assert "experiment 3" in told.reason
        assert not await rp.was_preempted("0.2.1")

    other = Pool(temporal_client, rp.sink_queue)  # preemption off: Determined's default
    async with fake_agent(temporal_client, other.name, other.agent("a1"), 1):
        assert (await other.request(1, priority=42)).status == "granted"
        assert (await other.request(2, priority=1)).status == "queued"
        assert (await other.describe())["preempting"] == []
        assert not await other.was_preempted("1.1.1")
        await other.release("1.1.1")
        await other.granted("2.2.1")

    tasks = Pool(temporal_client, rp.sink_queue)
    preempts_tasks = PoolInput(name=tasks.name, policy=PoolPolicy(preemption=True,
                                                                  preempt_tasks=True))
    async with fake_agent(temporal_client, tasks.name, tasks.agent("a1"), 1,
                          pool_input=preempts_tasks):
        assert (await tasks.request(0, task=True)).status == "granted"
        assert (await tasks.request(2, priority=1)).status == "queued"
        assert "priority 1" in (await tasks.preempted("0.1.1")).reason


async def test_small_requests_backfill_beside_a_waiting_large_one_which_still_starts(
    temporal_client: Client, rp: Pool
) -> None:
    async with (fake_agent(temporal_client, rp.name, rp.agent("a1"), 4),
                fake_agent(temporal_client, rp.name, rp.agent("a2"), 4)):
        for _ in range(6):
            assert (await rp.request(1)).status == "granted"
        held = {a["id"]: [x["allocationId"] for x in a["allocations"]]
                for a in (await rp.describe())["agents"]}
        assert sorted(map(len, held.values())) == [2, 4]  # best fit: one agent full
        big = await rp.request(2, slots=4)
        assert big.status == "queued"  # it reserves the agent with 2 free slots
        roomy = next(agent for agent, keys in held.items() if len(keys) == 2)
        # 1-slot requests behind it run on the other agent's freed slots, not on the reserved
        # one, whose 2 free slots stay free for the 4-slot request.
        full = next(agent for agent in held if agent != roomy)
        await rp.release(held[full][0])
        small = await rp.request(3)
        assert small.status == "granted" and small.allocation is not None
        assert small.allocation.agent_id == full
        assert (await rp.request(3)).status == "queued"
        for key in held[roomy]:
            await rp.release(key)
        got = await rp.granted("2.7.1")
        assert got.agent_id == roomy and len(got.slot_ids) == 4
        assert await rp.is_waiting("3.9.1")

    old = Pool(temporal_client, rp.sink_queue)
    blocking = PoolInput(name=old.name, policy=PoolPolicy(backfill=False))
    async with fake_agent(temporal_client, old.name, old.agent("a1"), 2, pool_input=blocking):
        assert (await old.request(1)).status == "granted"
        assert (await old.request(2, slots=2)).status == "queued"
        # Without backfilling the large request blocks the free slot (the old rule).
        assert (await old.request(3)).status == "queued"


async def test_the_head_keeps_the_agent_it_drains_while_another_frees_more_slots(
    temporal_client: Client, rp: Pool
) -> None:
    async with (fake_agent(temporal_client, rp.name, rp.agent("a1"), 4),
                fake_agent(temporal_client, rp.name, rp.agent("a2"), 4)):
        for _ in range(8):
            assert (await rp.request(1)).status == "granted"
        held = {a["id"]: [x["allocationId"] for x in a["allocations"]]
                for a in (await rp.describe())["agents"]}
        first, other = rp.agent("a1"), rp.agent("a2")
        await rp.release(held[first][0])
        assert (await rp.request(2, slots=4)).status == "queued"  # keeps a1: the most free
        await rp.release(held[other][0])
        await rp.release(held[other][1])
        # a2 now has more free slots than a1, but a1 has drained for longer: the head keeps it,
        # and a 1-slot request behind it backfills a2 (before, the reservation moved to a2 and
        # the backfill took a1's free slot, so the head waited for a1 and a2 in turn).
        small = await rp.request(3)
        assert small.status == "granted" and small.allocation is not None
        assert small.allocation.agent_id == other
        for key in held[first][1:]:
            await rp.release(key)
        got = await rp.granted("2.9.1")
        assert got.agent_id == first and len(got.slot_ids) == 4
    save("pool-backfill", await rp.handle.fetch_history())


async def test_fair_share_goes_to_the_workspace_then_the_user_holding_fewer_slots(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2):
        assert (await rp.request(1, user_id=1, workspace_id=1)).status == "granted"
        assert (await rp.request(2, user_id=1, workspace_id=1)).status == "granted"
        # User 1 holds both slots through two experiments: user 2's newer request goes first,
        # though experiment 4 holds no more than experiment 3.
        assert (await rp.request(3, user_id=1, workspace_id=1)).status == "queued"
        assert (await rp.request(4, user_id=2, workspace_id=1)).status == "queued"
        assert await _queue(rp) == [4, 3]
        # A workspace holding nothing comes before both.
        assert (await rp.request(5, user_id=3, workspace_id=2)).status == "queued"
        assert await _queue(rp) == [5, 4, 3]
        await rp.release("1.1.1")
        assert (await rp.granted("5.5.1")).agent_id == rp.agent("a1")


async def test_a_workspace_never_holds_more_than_its_cap(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 4):
        capped = {"workspace_id": 7, "workspace_max_slots": 2}
        assert (await rp.request(1, **capped)).status == "granted"
        assert (await rp.request(2, **capped)).status == "granted"
        assert (await rp.request(1, **capped)).status == "queued"  # slots free, cap reached
        assert (await rp.request(3, workspace_id=8)).status == "granted"
        await rp.release("1.1.1")
        assert (await rp.granted("1.3.1")).agent_id == rp.agent("a1")


async def test_a_disabled_slot_gets_no_new_work_until_enabled(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 2):
        await rp.handle.signal("set_slot_enabled",
                               SlotEnabled(rp.agent("a1"), 0, False, "fan failure"))

        async def disabled() -> bool:
            agents = (await rp.describe())["agents"]
            return agents[0]["disabledSlots"] == {"0": "fan failure"}

        await eventually(disabled, 10, "slot 0 disabled")
        first = await rp.request(1)
        assert first.allocation is not None and first.allocation.slot_ids == [1]
        assert (await rp.request(2)).status == "queued"
        await rp.handle.signal("set_slot_enabled", SlotEnabled(rp.agent("a1"), 0, True))
        assert (await rp.granted("2.2.1")).slot_ids == [0]


async def test_a_job_moves_ahead_of_or_behind_another_taking_its_priority(
    temporal_client: Client, rp: Pool
) -> None:
    async with fake_agent(temporal_client, rp.name, rp.agent("a1"), 1):
        assert (await rp.request(1)).status == "granted"
        for experiment in (2, 3, 4):
            assert (await rp.request(experiment)).status == "queued"
        assert (await rp.request(5, priority=50)).status == "queued"
        assert await _queue(rp) == [2, 3, 4, 5]
        await rp.handle.signal("move_job", MoveJob(4, anchor_experiment_id=2, ahead=True))
        await eventually(lambda: _queue_is(rp, [4, 2, 3, 5]), 10, "4 ahead of 2")
        await rp.handle.signal("move_job", MoveJob(2, anchor_experiment_id=3, ahead=False))
        await eventually(lambda: _queue_is(rp, [4, 3, 2, 5]), 10, "2 behind 3")
        await rp.handle.signal("move_job", MoveJob(5, anchor_experiment_id=3, ahead=True))
        await eventually(lambda: _queue_is(rp, [4, 5, 3, 2]), 10, "5 ahead of 3")
        queue = (await rp.describe())["queue"]
        assert [r["priority"] for r in queue] == [42, 42, 42, 42]  # 5 took its anchor's
        await rp.release("1.1.1")
        await rp.granted("4.4.1")

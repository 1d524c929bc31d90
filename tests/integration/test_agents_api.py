"""The agents, slots and job-queue routes against the live master and its pool schedulers."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from temporalio.client import Client

from common.temporal_names import resource_pool_workflow_id
from tests.master_fixtures import LiveMaster
from tests.waiting import eventually
from workflows.pool_types import SlotReply, SlotRequest


def registration(pool: str, boot: str, slots: int = 2) -> dict[str, Any]:
    return {"resourcePool": pool, "version": "test", "bootId": boot,
            "slots": [{"id": str(i), "type": "TYPE_CPU", "device": {"brand": "cpu"}}
                      for i in range(slots)]}


async def pool_agents(client: Client, pool: str) -> dict[str, Any]:
    described = await client.get_workflow_handle(resource_pool_workflow_id(pool)).query(
        "describe")
    return {a["id"]: a for a in described["agents"]}


async def test_registration_reaches_the_scheduler_once_per_boot(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    pool, agent = f"api-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    for _ in range(3):  # heartbeats: the same boot id
        assert (await api.put(f"/api/v1/agents/{agent}", json=registration(pool, "b1"))).json() \
            == {}
    handle = live_master.temporal.get_workflow_handle(resource_pool_workflow_id(pool))
    signals = [e for e in (await handle.fetch_history()).events
               if e.HasField("workflow_execution_signaled_event_attributes")]
    assert len(signals) == 1  # the first registration only; heartbeats cost no history
    assert (await pool_agents(live_master.temporal, pool))[agent]["slotIds"] == [0, 1]

    listed = (await api.get("/api/v1/agents")).json()["agents"]
    mine = next(a for a in listed if a["id"] == agent)
    assert mine["resourcePool"] == pool and mine["alive"] and mine["enabled"]
    assert mine["usedSlots"] == 0 and set(mine["slots"]) == {"0", "1"}

    await api.put(f"/api/v1/agents/{agent}", json=registration(pool, "b2"))  # restarted

    async def two_signals() -> bool:
        # A signal that arrives during a workflow task is written to the history after it.
        return len([e for e in (await handle.fetch_history()).events
                    if e.HasField("workflow_execution_signaled_event_attributes")]) == 2

    await eventually(two_signals, timeout=30, what="the restart's registration signal")
    await handle.terminate("test over")


async def test_disable_drains_and_slots_show_their_trial(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    pool, agent = f"api-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    await api.put(f"/api/v1/agents/{agent}", json=registration(pool, "b1", slots=1))
    handle = live_master.temporal.get_workflow_handle(resource_pool_workflow_id(pool))
    reply = await handle.execute_update(
        "request_slots", SlotRequest("7.70.1", "nobody", 7, 70), result_type=SlotReply)
    assert reply.status == "granted"

    slots = (await api.get(f"/api/v1/agents/{agent}/slots")).json()["slots"]
    assert [(s["id"], s["allocationId"], s["trialId"]) for s in slots] == [("0", "7.70.1", 70)]

    assert (await api.post(f"/api/v1/agents/{agent}/disable")).json() == {}
    for _ in range(50):
        if not (await pool_agents(live_master.temporal, pool))[agent]["enabled"]:
            break
        await asyncio.sleep(0.1)
    assert (await api.get(f"/api/v1/agents/{agent}")).json()["agent"]["enabled"] is False
    queued = await handle.execute_update(
        "request_slots", SlotRequest("8.80.1", "nobody", 8, 80, priority=10),
        result_type=SlotReply)
    assert queued.status == "queued"

    jobs = (await api.get("/api/v1/job-queues", params={"resourcePool": pool})).json()["jobs"]
    assert [(j["entityId"], j["summary"]["state"], j["summary"]["jobsAhead"]) for j in jobs] == [
        ("7", "STATE_SCHEDULED", 0), ("8", "STATE_QUEUED", 1)]

    assert (await api.post(f"/api/v1/agents/{agent}/enable")).json() == {}
    assert (await api.post("/api/v1/agents/nobody-here/enable")).status_code == 404
    await handle.terminate("test over")

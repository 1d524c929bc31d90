"""The agents, slots and job-queue routes against the live master and its pool schedulers."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from temporalio.client import Client

from api.schemas.agents import SlotList
from api.schemas.jobs import JobQueue
from common.temporal_names import resource_pool_workflow_id
from tests.integration.test_ntsc_api import launch
from tests.master_fixtures import LiveMaster
from tests.waiting import eventually
from wire.pools import SlotReply, SlotRequest


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
        answer = await api.put(f"/api/v1/agents/{agent}", json=registration(pool, "b1"))
        assert answer.status_code == 200 and "runPorts" in answer.json()
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


async def test_each_agent_is_told_the_ports_of_the_other_agents_runs(
    api: httpx.AsyncClient,
) -> None:
    pool = f"api-{uuid.uuid4().hex[:8]}"
    first, second = (f"agent-{uuid.uuid4().hex[:8]}" for _ in range(2))
    address = f"10.{uuid.uuid4().int % 250}.77.{uuid.uuid4().int % 250}"
    ports = [{"port": 41234, "uid": 2_000_000_005}, {"port": 41235, "uid": 2_000_000_006}]
    mine = await api.put(f"/api/v1/agents/{first}", json={
        **registration(pool, "b1"), "runPorts": ports, "addresses": [address, "fd00::77"]})
    assert mine.status_code == 200, mine.text
    theirs = (await api.put(f"/api/v1/agents/{second}", json={
        **registration(pool, "b1"), "runPorts": [{"port": 5000, "uid": 2_000_000_001}],
        "addresses": ["10.250.250.250"]})).json()["runPorts"]
    assert sorted((p["address"], p["port"], p["uid"]) for p in theirs
                  if p["address"] in (address, "fd00::77")) == sorted(
        (a, p["port"], p["uid"]) for a in (address, "fd00::77") for p in ports)
    # Its own ports are not in its answer; they are in the first agent's next one.
    assert not [p for p in theirs if p["address"] == "10.250.250.250"]
    again = (await api.put(f"/api/v1/agents/{first}", json=registration(pool, "b1"))).json()
    assert {"address": "10.250.250.250", "port": 5000, "uid": 2_000_000_001} in again["runPorts"]
    # Without them now (none listens any more): no longer told.
    theirs = (await api.put(f"/api/v1/agents/{second}", json=registration(pool, "b1"))).json()
    assert not [p for p in theirs["runPorts"] if p["address"] == address]

    for bad, field in (({"addresses": ["not-an-ip"]}, "addresses"),
                       ({"runPorts": [{"port": 0, "uid": 1}]}, "runPorts"),
                       ({"runPorts": [{"port": 1, "uid": 1}] * 4097}, "runPorts")):
        answer = await api.put(f"/api/v1/agents/{first}", json={**registration(pool, "b1"), **bad})
        assert answer.status_code in (400, 422) and field in answer.text, answer.text


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


async def test_job_queue_and_slots_name_tasks_order_jobs_and_say_what_they_wait_for(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Issue 37 item 6 against the pool's own state: a notebook's job shows its own slots and no
    trial counts, its slot names the notebook (not "Trial 0"); an earlier experiment is listed
    before a later one although fair share queues the later one's trial first; each waiting job
    says what it waits for."""
    pool, agent = f"api-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    earlier = 900_000 + uuid.uuid4().int % 50_000  # no such experiments: ordered by requests
    later = earlier + 1
    notebook = (await launch(api, "notebooks"))["notebook"]  # in a pool no agent serves
    await api.put(f"/api/v1/agents/{agent}", json=registration(pool, "b1", slots=2))
    handle = live_master.temporal.get_workflow_handle(resource_pool_workflow_id(pool))

    async def ask(allocation: str, experiment: int, trial: int) -> str:
        reply = await handle.execute_update(
            "request_slots", SlotRequest(allocation, "nobody", experiment, trial),
            result_type=SlotReply)
        return str(reply.status)

    assert await ask(f"{notebook['id']}.1", 0, 0) == "granted"  # as the notebook's task asks
    assert await ask(f"{earlier}.1.1", earlier, 1) == "granted"
    assert await ask(f"{earlier}.2.1", earlier, 2) == "queued"
    assert await ask(f"{later}.1.1", later, 1) == "queued"  # served first: it holds nothing

    answer = (await api.get("/api/v1/job-queues", params={"resourcePool": pool})).json()
    JobQueue.model_validate(answer)  # the documented shape
    jobs = answer["jobs"]
    assert [(j["jobId"], j["summary"]["state"], j["summary"]["jobsAhead"]) for j in jobs] == [
        (notebook["id"], "STATE_SCHEDULED", 0), (f"experiment-{earlier}", "STATE_SCHEDULED", 1),
        (f"experiment-{later}", "STATE_QUEUED", 2)]
    task, first, second = jobs
    assert task["type"] == "TYPE_NOTEBOOK"
    assert (task["allocatedSlots"], task["requestedSlots"]) == (1, 1)
    assert task["runningTrials"] is None and task["queuedTrials"] is None
    assert task.get("waiting") is None and task["submissionTime"]
    assert (first["allocatedSlots"], first["requestedSlots"], first["runningTrials"],
            first["queuedTrials"]) == (1, 2, 1, 1)
    assert second["waiting"] == f"1 slot; 0 free in pool {pool}"
    assert first["waiting"] == f"behind job experiment-{later}"
    full = (await api.get("/api/v1/job-queues-v2", params={"resourcePool": pool})).json()
    mine = next(j["full"] for j in full["jobs"] if j["full"]["jobId"] == notebook["id"])
    assert (mine["name"], mine["allocatedSlots"], mine["requestedSlots"]) == (
        notebook["description"], 1, 1)

    async def waiting_in_its_own_pool() -> list[str]:
        jobs = (await api.get("/api/v1/job-queues", params={
            "resourcePool": notebook["resourcePool"]})).json()["jobs"]
        return [j["waiting"].split("; ", 1)[-1] for j in jobs]

    await eventually(waiting_in_its_own_pool, timeout=30, what="the notebook's own request")
    assert await waiting_in_its_own_pool() == [f"no agent in pool {notebook['resourcePool']}"]

    listed = (await api.get(f"/api/v1/agents/{agent}/slots")).json()
    SlotList.model_validate(listed)
    slots = listed["slots"]
    named = sorted((s["taskType"], s["taskName"], s["trialId"], s["experimentId"])
                   for s in slots)
    assert named == [("TASK_TYPE_NOTEBOOK", notebook["description"], None, None),
                     ("TASK_TYPE_TRIAL", f"Trial 1 (Experiment {earlier})", 1, earlier)]
    summaries = (await api.get("/api/v1/tasks")).json()["allocationIdToSummary"]
    assert summaries[f"{notebook['id']}.1"]["name"] == notebook["description"]
    assert summaries[f"{earlier}.1.1"]["name"] == f"Trial 1 (Experiment {earlier})"

    await handle.terminate("test over")
    await api.post(f"/api/v1/notebooks/{notebook['id']}/kill")

"""Resource pools bound to workspaces, workspaces' default pools and slot cap, and slots
disabled and enabled: the routes over real HTTP against the live master, its PostgreSQL and
its pools' schedulers (the agents are phantoms registered over the API, which no worker
serves). Two real users besides the admin: a workspace's owner and another user."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from temporalio.api.enums.v1 import EventType

from api.auth import open_session
from common.temporal_names import PoolMessages, resource_pool_workflow_id
from tests.integration.test_api import model_definition
from tests.master_fixtures import LiveMaster
from tests.waiting import eventually
from wire.pools import SlotEnabled

pytestmark = pytest.mark.asyncio(loop_scope="session")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def phantom_pool(api: httpx.AsyncClient, slots: int = 2) -> tuple[str, str]:
    """A pool that exists (a phantom agent registered in it), and the agent's id."""
    pool_name, agent_id = unique("bound"), unique("phantom")
    registered = await api.put(f"/api/v1/agents/{agent_id}", json={
        "resourcePool": pool_name, "bootId": uuid.uuid4().hex,
        "slots": [{"id": str(i), "type": "TYPE_CPU"} for i in range(slots)]})
    assert registered.status_code == 200, registered.text
    return pool_name, agent_id


async def user_client(api: httpx.AsyncClient, live_master: LiveMaster) -> httpx.AsyncClient:
    name = unique("rp-user")
    created = await api.post("/api/v1/users", json={"user": {"username": name},
                                                    "password": "a-long-password"})
    assert created.status_code == 200, created.text
    token = await open_session(live_master.pool, created.json()["user"]["id"],
                               timedelta(minutes=10))
    return httpx.AsyncClient(base_url=live_master.url, timeout=30,
                             headers={"Authorization": f"Bearer {token}"})


@pytest_asyncio.fixture(loop_scope="session")
async def owner(api: httpx.AsyncClient, live_master: LiveMaster
                ) -> AsyncIterator[httpx.AsyncClient]:
    """An ordinary user, who makes the workspaces below."""
    async with await user_client(api, live_master) as client:
        yield client


async def workspace(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """A new workspace with a project `main`."""
    made = await client.post("/api/v1/workspaces", json={"name": unique("ws"), **body})
    assert made.status_code == 200, made.text
    found = made.json()["workspace"]
    project = await client.post(f"/api/v1/workspaces/{found['id']}/projects",
                                json={"name": "main"})
    assert project.status_code == 200, project.text
    return dict(found)


def config(workspace_name: str, pool_name: str | None = None, slots: int = 1) -> str:
    resources: dict[str, Any] = {"slots_per_trial": slots}
    if pool_name is not None:
        resources["resource_pool"] = pool_name
    return yaml.safe_dump({
        "name": "bindings", "entrypoint": "python3 train.py", "workspace": workspace_name,
        "project": "main", "resources": resources,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})


async def submit(client: httpx.AsyncClient, text: str, validate_only: bool = True
                 ) -> httpx.Response:
    return await client.post("/api/v1/experiments", json={
        "config": text, "validateOnly": validate_only,
        "modelDefinition": model_definition({"train.py": b"pass\n"})})


def bindings_path(pool_name: str) -> str:
    return f"/api/v1/resource-pools/{pool_name}/workspace-bindings"


async def test_a_bound_pool_serves_only_its_workspaces(
    api: httpx.AsyncClient, owner: httpx.AsyncClient,
) -> None:
    pool_name, _ = await phantom_pool(api)
    mine, theirs = await workspace(owner), await workspace(owner)
    assert (await api.get(bindings_path(pool_name))).json()["workspaceIds"] == []
    # Unbound, every workspace may use it.
    assert (await submit(owner, config(theirs["name"], pool_name))).status_code == 200

    bound = await api.post(bindings_path(pool_name), json={
        "resourcePoolName": pool_name, "workspaceNames": [mine["name"]]})
    assert bound.status_code == 200, bound.text
    listed = (await api.get(bindings_path(pool_name))).json()
    assert listed["workspaceIds"] == [mine["id"]] and listed["pagination"]["total"] == 1
    again = await api.post(bindings_path(pool_name), json={"workspaceIds": [mine["id"]]})
    assert again.status_code == 200  # binding twice changes nothing
    assert (await api.get(bindings_path(pool_name))).json()["workspaceIds"] == [mine["id"]]

    refused = await submit(owner, config(theirs["name"], pool_name))
    assert refused.status_code == 400, refused.text
    detail = " ".join(refused.json()["details"])
    assert "resources.resource_pool" in detail and pool_name in detail
    assert theirs["name"] in detail and mine["name"] in detail
    allowed = await submit(owner, config(mine["name"], pool_name))
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["config"]["resources"]["resource_pool"] == pool_name

    def available(ws: dict[str, Any]) -> Any:
        return api.get(f"/api/v1/workspaces/{ws['id']}/available-resource-pools")

    mine_pools = (await available(mine)).json()["resourcePools"]
    theirs_pools = (await available(theirs)).json()["resourcePools"]
    assert pool_name in mine_pools and "default" in mine_pools
    assert pool_name not in theirs_pools and "default" in theirs_pools

    # Replace: theirs only; remove: none left, so every workspace's again.
    replaced = await api.put(bindings_path(pool_name), json={"workspaceNames": [theirs["name"]]})
    assert replaced.status_code == 200, replaced.text
    assert (await api.get(bindings_path(pool_name))).json()["workspaceIds"] == [theirs["id"]]
    assert (await submit(owner, config(mine["name"], pool_name))).status_code == 400
    not_bound = await api.request("DELETE", bindings_path(pool_name),
                                  json={"workspaceNames": [mine["name"]]})
    assert not_bound.status_code == 400 and "is not bound" in not_bound.json()["details"][0]
    removed = await api.request("DELETE", bindings_path(pool_name),
                                json={"workspaceNames": [theirs["name"]]})
    assert removed.status_code == 200, removed.text
    assert (await api.get(bindings_path(pool_name))).json()["workspaceIds"] == []
    assert (await submit(owner, config(mine["name"], pool_name))).status_code == 200


async def test_binding_refusals_name_the_field(
    api: httpx.AsyncClient, owner: httpx.AsyncClient,
) -> None:
    pool_name, _ = await phantom_pool(api)
    ws = await workspace(owner)
    body = {"workspaceNames": [ws["name"]]}
    by_owner = await owner.post(bindings_path(pool_name), json=body)
    assert by_owner.status_code == 403 and "admins" in by_owner.json()["message"]
    assert (await owner.request("DELETE", bindings_path(pool_name), json=body)).status_code == 403
    assert (await owner.put(bindings_path(pool_name), json=body)).status_code == 403
    assert (await owner.get(bindings_path(pool_name))).status_code == 200  # reading is anyone's

    missing = unique("no-pool")
    for answer in (await api.post(bindings_path(missing), json=body),
                   await api.get(bindings_path(missing))):
        assert answer.status_code == 404 and missing in answer.json()["message"]
        assert answer.json()["details"][0].startswith("resourcePoolName:")
    default = await api.post(bindings_path("default"), json=body)
    assert default.status_code == 400 and "default" in default.json()["message"]
    unknown = await api.post(bindings_path(pool_name), json={
        "workspaceNames": ["no-such-workspace"], "workspaceIds": [999_999]})
    assert unknown.status_code == 400
    assert sorted(unknown.json()["details"]) == [
        "workspaceIds: no workspace has id 999999",
        "workspaceNames: no workspace is named 'no-such-workspace'"]
    none = await api.post(bindings_path(pool_name), json={})
    assert none.status_code == 400 and none.json()["details"][0].startswith("workspaceNames:")
    other = await api.post(bindings_path(pool_name), json={"resourcePoolName": "x", **body})
    assert other.status_code == 400 and "resourcePoolName" in other.json()["details"][0]
    bad = await api.post(bindings_path(pool_name), json={"workspaceIds": ["one"]})
    assert bad.status_code == 400 and "workspaceIds" in bad.json()["details"][0]
    assert (await api.get(bindings_path(pool_name))).json()["workspaceIds"] == []
    gone = await api.get("/api/v1/workspaces/999999/available-resource-pools")
    assert gone.status_code == 404


async def test_a_workspaces_default_pools_take_submissions_that_name_none(
    api: httpx.AsyncClient, owner: httpx.AsyncClient,
) -> None:
    compute, _ = await phantom_pool(api)
    aux, _ = await phantom_pool(api)
    ws = await workspace(owner, defaultComputePool=compute)
    assert ws["defaultComputePool"] == compute and ws["defaultAuxPool"] == ""
    patched = await owner.patch(f"/api/v1/workspaces/{ws['id']}", json={
        "name": None, "defaultComputeResourcePool": None, "defaultAuxResourcePool": aux})
    assert patched.status_code == 200, patched.text
    shown = patched.json()["workspace"]
    assert (shown["defaultComputePool"], shown["defaultAuxPool"]) == (compute, aux)

    def pool_of(answer: httpx.Response) -> str:
        assert answer.status_code == 200, answer.text
        return str(answer.json()["config"]["resources"]["resource_pool"])

    assert pool_of(await submit(owner, config(ws["name"]))) == compute
    assert pool_of(await submit(owner, config(ws["name"], slots=0))) == aux
    assert pool_of(await submit(owner, config(ws["name"], "default"))) == "default"
    # Elsewhere, the cluster's default.
    other = await workspace(owner)
    assert pool_of(await submit(owner, config(other["name"]))) == "default"
    # A task too (a notebook's preview): its compute pool, or its aux pool with 0 slots.
    for slots, expected in ((1, compute), (0, aux)):
        task = await owner.post("/api/v1/notebooks", json={
            "config": {"resources": {"slots": slots}}, "workspaceId": ws["id"], "preview": True})
        assert pool_of(task) == expected
    # A real submission stores the pool it went to.
    created = await submit(owner, config(ws["name"]), validate_only=False)
    assert created.status_code == 200, created.text
    experiment = created.json()["experiment"]
    assert experiment["resourcePool"] == compute
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")

    # A default pool must exist and be available to the workspace; "" clears it.
    missing = await owner.patch(f"/api/v1/workspaces/{ws['id']}",
                                json={"defaultComputeResourcePool": "no-such-pool"})
    assert missing.status_code == 400
    assert missing.json()["details"][0].startswith("defaultComputeResourcePool:")
    made = await owner.post("/api/v1/workspaces", json={"name": unique("ws"),
                                                        "defaultAuxPool": "no-such-pool"})
    assert made.status_code == 400 and made.json()["details"][0].startswith("defaultAuxPool:")
    elsewhere, _ = await phantom_pool(api)
    assert (await api.post(bindings_path(elsewhere),
                           json={"workspaceNames": [other["name"]]})).status_code == 200
    taken = await owner.patch(f"/api/v1/workspaces/{ws['id']}",
                              json={"defaultComputeResourcePool": elsewhere})
    assert taken.status_code == 400 and elsewhere in taken.json()["details"][0]
    cleared = await owner.patch(f"/api/v1/workspaces/{ws['id']}",
                                json={"defaultComputeResourcePool": ""})
    assert cleared.json()["workspace"]["defaultComputePool"] == ""
    assert pool_of(await submit(owner, config(ws["name"]))) == "default"
    # A default pool later bound to other workspaces only refuses the submission.
    await owner.patch(f"/api/v1/workspaces/{ws['id']}", json={"defaultAuxResourcePool": ""})
    await api.patch(f"/api/v1/workspaces/{other['id']}",
                    json={"defaultComputeResourcePool": compute})
    assert (await api.post(bindings_path(compute),
                           json={"workspaceNames": [ws["name"]]})).status_code == 200
    refused = await submit(owner, config(other["name"]))
    assert refused.status_code == 400 and compute in refused.json()["details"][0]
    task = await owner.post("/api/v1/notebooks", json={"workspaceId": other["id"],
                                                       "preview": True})
    assert task.status_code == 400
    assert task.json()["details"][0].startswith("resources.resource_pool:")


async def test_only_admins_cap_a_workspaces_slots(
    api: httpx.AsyncClient, owner: httpx.AsyncClient, live_master: LiveMaster,
) -> None:
    ws = await workspace(owner)
    path = f"/api/v1/workspaces/{ws['id']}"
    assert ws["maxSlots"] is None
    by_owner = await owner.patch(path, json={"maxSlots": 4})
    assert by_owner.status_code == 403 and "admin" in by_owner.json()["message"]
    capped = await api.patch(path, json={"maxSlots": 4})
    assert capped.status_code == 200 and capped.json()["workspace"]["maxSlots"] == 4
    assert await live_master.pool.fetchval(
        "SELECT max_slots FROM workspaces WHERE id = $1", ws["id"]) == 4
    renamed = await owner.patch(path, json={"name": unique("ws")})  # the cap stays
    assert renamed.status_code == 200 and renamed.json()["workspace"]["maxSlots"] == 4
    for bad in (-1, "four", 2**31):
        answer = await api.patch(path, json={"maxSlots": bad})
        assert answer.status_code == 400 and "maxSlots" in answer.json()["details"][0]
    lifted = await api.patch(path, json={"maxSlots": None})
    assert lifted.status_code == 200 and lifted.json()["workspace"]["maxSlots"] is None
    # Determined's default workspace cannot be changed, but an admin may cap it.
    try:
        assert (await api.patch("/api/v1/workspaces/1", json={"maxSlots": 8})).status_code == 200
        assert (await api.get("/api/v1/workspaces/1")).json()["workspace"]["maxSlots"] == 8
        assert (await api.patch("/api/v1/workspaces/1",
                                json={"defaultComputeResourcePool": ""})).status_code == 409
    finally:
        await api.patch("/api/v1/workspaces/1", json={"maxSlots": None})


async def slot_signals(live_master: LiveMaster, pool_name: str) -> list[SlotEnabled]:
    """The `set_slot_enabled` signals in the pool's history, decoded."""
    handle = live_master.temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
    found = []
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        signal = event.workflow_execution_signaled_event_attributes
        if signal.signal_name == PoolMessages.SET_SLOT_ENABLED:
            [change] = await live_master.temporal.data_converter.decode(
                signal.input.payloads, [SlotEnabled])
            found.append(change)
    return found


async def test_a_disabled_slot_is_stored_shown_and_told_to_its_pool_again_at_each_boot(
    api: httpx.AsyncClient, owner: httpx.AsyncClient, live_master: LiveMaster,
) -> None:
    pool_name, agent_id = await phantom_pool(api, slots=3)
    path = f"/api/v1/agents/{agent_id}/slots"
    disabled = await api.post(f"{path}/1/disable", json={"reason": "fan failing"})
    assert disabled.status_code == 200, disabled.text
    slot = disabled.json()["slot"]
    assert (slot["id"], slot["enabled"], slot["disabledReason"]) == ("1", False, "fan failing")
    slots = {s["id"]: s for s in (await api.get(path)).json()["slots"]}
    assert [slots[i]["enabled"] for i in ("0", "1", "2")] == [True, False, True]
    agent = (await api.get(f"/api/v1/agents/{agent_id}")).json()["agent"]
    assert agent["enabled"] and agent["slotStats"]["typeStats"]["TYPE_CPU"]["disabled"] == 1
    assert await live_master.pool.fetchval(
        "SELECT reason FROM disabled_slots WHERE agent_id = $1 AND slot_id = '1'",
        agent_id) == "fan failing"
    # `det slot disable` sends an empty body: the reason says who.
    assert (await api.post(f"{path}/2/disable", json={})).json()["slot"]["disabledReason"] == (
        "disabled by admin")

    async def told() -> list[SlotEnabled]:
        return await slot_signals(live_master, pool_name)

    await eventually(lambda: _count(told, 2), timeout=30, what="both signals in the pool")
    assert [(s.agent_id, s.slot_id, s.enabled, s.reason) for s in await told()] == [
        (agent_id, 1, False, "fan failing"), (agent_id, 2, False, "disabled by admin")]

    enabled = await api.post(f"{path}/2/enable")
    assert enabled.status_code == 200 and enabled.json()["slot"]["enabled"] is True
    assert enabled.json()["slot"]["disabledReason"] is None

    # The agent restarts (a new boot): the pool hears again that slot 1 is disabled.
    again = await api.put(f"/api/v1/agents/{agent_id}", json={
        "resourcePool": pool_name, "bootId": uuid.uuid4().hex,
        "slots": [{"id": str(i), "type": "TYPE_CPU"} for i in range(3)]})
    assert again.status_code == 200
    await eventually(lambda: _count(told, 4), timeout=30, what="the re-sent signal")
    assert [(s.slot_id, s.enabled) for s in (await told())[2:]] == [(2, True), (1, False)]

    async def pool_disabled() -> dict[str, str] | None:
        handle = live_master.temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
        agents = {a["id"]: a for a in (await handle.query(PoolMessages.DESCRIBE))["agents"]}
        found: dict[str, str] | None = agents.get(agent_id, {}).get("disabledSlots")
        return found if found == {"1": "fan failing"} else None

    # The scheduler holds it too: it places no new work on slot 1.
    await eventually(pool_disabled, timeout=30, what="the pool's disabledSlots")
    slots = {s["id"]: s for s in (await api.get(path)).json()["slots"]}
    assert [slots[i]["enabled"] for i in ("0", "1", "2")] == [True, False, True]

    # Refusals: non-admins, unknown agents and slots, a body naming another slot.
    by_owner = await owner.post(f"{path}/0/disable", json={})
    assert by_owner.status_code == 403 and "admins" in by_owner.json()["message"]
    assert (await owner.post(f"{path}/1/enable")).status_code == 403
    nobody = await api.post("/api/v1/agents/no-such-agent/slots/0/disable", json={})
    assert nobody.status_code == 404 and nobody.json()["details"][0].startswith("agentId:")
    no_slot = await api.post(f"{path}/7/enable")
    assert no_slot.status_code == 404 and no_slot.json()["details"][0].startswith("slotId:")
    mismatch = await api.post(f"{path}/0/disable", json={"slotId": "2"})
    assert mismatch.status_code == 400 and mismatch.json()["details"][0].startswith("slotId:")
    long = await api.post(f"{path}/0/disable", json={"reason": "x" * 501})
    assert long.status_code == 400 and "reason" in long.json()["details"][0]
    await api.post(f"{path}/1/enable")


async def _count(told: Any, n: int) -> bool:
    return len(await told()) >= n

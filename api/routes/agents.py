"""Agents, their slots, and the job queue: registration (`PUT /agents/{id}`), listing, drain.

The database holds what agents said about themselves (slots, last seen); the resource pool's
scheduler (`ResourcePoolWorkflow`) holds who runs where and the queue, read with its `describe`
query. The master tells a pool about an agent once per boot (signal `register_agent`), not on
every registration heartbeat, so heartbeats cost the pool's history nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, IPvAnyAddress
from temporalio.client import Client

from api.auth import CurrentPrincipal, require_admin
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError, not_found
from api.queries import agents as queries
from api.queries import tasks as task_queries
from api.schemas import Empty, answers
from api.schemas.agents import AgentAnswer, AgentList, AgentRegistered, SlotChanged, SlotList
from api.schemas.jobs import JobQueue
from api.schemas.tasks import TaskList
from api.views import rfc3339
from common.registration_limits import MAX_ADDRESSES, MAX_RUN_PORTS
from common.temporal_names import PoolMessages, task_allocation_id
from services import pools
from wire.pools import (
    DEFAULT_PRIORITY,
    AgentEnabled,
    AgentRegistration,
)

router = APIRouter(tags=["agents"])

AGENT_ALIVE_SECONDS = 15


class SlotDevice(BaseModel):
    brand: str | None = None
    uuid: str | None = None
    memoryBytes: int | None = None


class Slot(BaseModel):
    id: str
    type: str = "TYPE_CPU"
    device: SlotDevice = Field(default_factory=SlotDevice)


class RunPort(BaseModel):
    """A port one of the agent's runs listens on, and the run's uid."""

    port: int = Field(ge=1, le=65535)
    uid: int = Field(ge=0, le=2**32 - 1)


class RegisterAgentRequest(BaseModel):
    resourcePool: str = "default"
    slots: list[Slot] = Field(default_factory=list)
    version: str | None = None
    bootId: str = Field("", max_length=200)
    # Where the agent's trials reach each other (a trial on several agents), as they see it.
    address: str = Field("", max_length=255, pattern=r"^[A-Za-z0-9.:\-\[\]%]*$")
    # Its runs' ports, and every address of its host: other agents close them to other users'
    # runs (agent_worker/trial_firewall.py).
    runPorts: list[RunPort] = Field(default_factory=list, max_length=MAX_RUN_PORTS)
    addresses: list[IPvAnyAddress] = Field(default_factory=list, max_length=MAX_ADDRESSES)


@router.put("/api/v1/agents/{agent_id}", **answers(AgentRegistered))
async def register_agent(
    agent_id: str, body: RegisterAgentRequest, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    slots = [s.model_dump() for s in body.slots]
    row = await queries.fetch_agent_boot(pool, agent_id)
    if row is None or row["boot_id"] != body.bootId:
        # The pool first, then the row: a failed signal is retried by the agent's next beat.
        await pools.signal_scheduler(
            temporal,
            body.resourcePool,
            PoolMessages.REGISTER_AGENT,
            AgentRegistration(
                agent_id=agent_id,
                slot_ids=pools.slot_ids(slots),
                boot_id=body.bootId,
                enabled=True if row is None else bool(row["enabled"]),
                address=body.address,
            ),
        )
        # The slots an admin disabled stay so across the agent's restarts (a new boot
        # registers as a fresh agent in the pool).
        await pools.resend_disabled_slots(pool, temporal, body.resourcePool, agent_id, slots)
    await queries.upsert_agent(pool, agent_id, body.resourcePool, slots, body.version,
                               body.bootId, [p.model_dump() for p in body.runPorts],
                               [str(a) for a in body.addresses])
    return {"runPorts": await queries.fetch_peer_run_ports(pool, agent_id, AGENT_ALIVE_SECONDS)}


def _holder(allocation_id: str, experiment_id: int, trial_id: int,
            tasks: dict[str, Any]) -> dict[str, Any]:
    """What holds an allocation, as `det slot list` and `det task list` name it: a trial
    ("Trial 5 (Experiment 3)", its task id `<experiment>.<trial>`) or an interactive task (its
    description, which names its kind; `tasks`: the active tasks by allocation id)."""
    if experiment_id:
        return {"taskId": f"{experiment_id}.{trial_id}", "taskType": "TASK_TYPE_TRIAL",
                "taskName": f"Trial {trial_id} (Experiment {experiment_id})"}
    task_id = allocation_id.rsplit(".", 1)[0]
    row = tasks.get(allocation_id)
    if row is None:  # over, while the pool still holds its slots
        return {"taskId": task_id, "taskType": "TASK_TYPE_GENERIC", "taskName": f"Task {task_id}"}
    return {"taskId": task_id, "taskType": f"TASK_TYPE_{row['task_type']}",
            "taskName": row["description"]}


def _agent_json(row: Any, scheduler: dict[str, Any] | None, tasks: dict[str, Any],
                disabled: dict[tuple[str, str], str]) -> dict[str, Any]:
    """Determined's v1Agent; `disabled`: the disabled slots' reasons by (agent, slot)."""
    used: dict[str, dict[str, Any]] = {}
    for alloc in (scheduler or {}).get("allocations", []):
        for sid in alloc.get("slotIds", []):
            used[str(sid)] = alloc
    slots = {}
    containers: dict[str, dict[str, Any]] = {}
    for s in row["slots"]:
        alloc = used.get(str(s["id"]))
        device = {**(s.get("device") or {}), "type": s.get("type", "TYPE_CPU")}
        device.setdefault("id", _int_or(s["id"], 0))
        container = _container(alloc, device) if alloc else None
        if container is not None:
            containers.setdefault(container["id"], container)
        reason = disabled.get((row["id"], str(s["id"])))
        enabled = row["enabled"] and reason is None
        slots[s["id"]] = {
            **s,
            "device": device,
            "enabled": enabled,
            "draining": not enabled and container is not None,
            # Epochal's: why an admin disabled the slot (`det slot disable`); Determined's
            # v1Slot has no field for it.
            "disabledReason": reason,
            "container": container,
            "allocationId": alloc["allocationId"] if alloc else None,
            # A trial's; an interactive task's allocation names experiment and trial 0.
            "trialId": alloc["trialId"] if alloc and alloc["experimentId"] else None,
            "experimentId": alloc["experimentId"] if alloc and alloc["experimentId"] else None,
            **(_holder(alloc["allocationId"], alloc["experimentId"], alloc["trialId"], tasks)
               if alloc else {"taskId": None, "taskType": None, "taskName": None}),
        }
    return {
        "id": row["id"],
        "resourcePool": row["resource_pool"],
        "slots": slots,
        "registeredTime": rfc3339(row["registered_at"]),
        "lastSeen": rfc3339(row["last_seen"]),
        "enabled": row["enabled"],
        # The pool's liveness (its liveness activity's heartbeats) is the one the scheduler acts
        # on; the last registration's age stands in only while the pool does not answer.
        "alive": bool(scheduler["alive"]) if scheduler is not None else bool(row["alive"]),
        "version": row["version"],
        "usedSlots": len(used),
        # Determined's v1Agent (`det agent list`, `det slot list`).
        "resourcePools": [row["resource_pool"]],
        "draining": not row["enabled"] and bool(used),
        "addresses": [],
        "containers": containers,
        "slotStats": _slot_stats(list(slots.values())),
    }


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _container(alloc: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    """A running allocation as Determined's v1Container: its id is the allocation id (one
    trial run holds its slots on one agent)."""
    return {"id": alloc["allocationId"], "state": "STATE_RUNNING", "devices": [device],
            "parent": alloc["allocationId"], "permissionDenied": False}


def _slot_stats(slots: list[dict[str, Any]]) -> dict[str, Any]:
    """Determined's v1SlotStats: slots counted by device type and by brand."""
    by_type: dict[str, dict[str, Any]] = {}
    by_brand: dict[str, dict[str, Any]] = {}
    for slot in slots:
        device = slot["device"]
        for key, table in ((device["type"], by_type), (device.get("brand") or "", by_brand)):
            stats = table.setdefault(key, {"total": 0, "disabled": 0, "draining": 0,
                                           "states": {}})
            stats["total"] += 1
            stats["disabled"] += 0 if slot["enabled"] else 1
            stats["draining"] += 1 if slot["draining"] else 0
            if slot["container"]:
                stats["states"]["STATE_RUNNING"] = stats["states"].get("STATE_RUNNING", 0) + 1
    return {"typeStats": by_type, "brandStats": by_brand}


async def _agents(pool: Any, temporal: Client, agent_id: str | None = None) -> list[dict[str, Any]]:
    rows = await queries.fetch_agents(pool, AGENT_ALIVE_SECONDS, agent_id)
    views = await pools.pool_views(temporal, {r["resource_pool"] for r in rows})
    tasks = {task_allocation_id(t["id"]): t for t in await task_queries.fetch_active_tasks(pool)}
    disabled = await pools.disabled_slots(pool, agent_id)
    out = []
    for r in rows:
        agents = (views.get(r["resource_pool"]) or {}).get("agents", [])
        scheduler = next((a for a in agents if a["id"] == r["id"]), None)
        out.append(_agent_json(r, scheduler, tasks, disabled))
    return out


@router.get("/api/v1/agents", **answers(AgentList))
async def list_agents(pool: Pool, temporal: Temporal) -> dict[str, Any]:
    return {"agents": await _agents(pool, temporal)}


@router.get("/api/v1/agents/{agent_id}", **answers(AgentAnswer))
async def get_agent(agent_id: str, pool: Pool, temporal: Temporal) -> dict[str, Any]:
    found = await _agents(pool, temporal, agent_id)
    if not found:
        raise not_found("agent", agent_id)
    return {"agent": found[0]}


@router.get("/api/v1/agents/{agent_id}/slots", **answers(SlotList))
async def list_slots(agent_id: str, pool: Pool, temporal: Temporal) -> dict[str, Any]:
    found = await _agents(pool, temporal, agent_id)
    if not found:
        raise not_found("agent", agent_id)
    return {"slots": list(found[0]["slots"].values())}


@router.get("/api/v1/tasks", **answers(TaskList))
async def list_task_allocations(pool: Pool, temporal: Temporal) -> dict[str, Any]:
    """Determined's GetTasks (`det task list`; `det slot list` names the trial holding each slot
    with it): the allocations the pools' schedulers hold and queue, and every interactive task
    not over yet, each with when it was registered, its agents' devices and its priority."""
    tasks = {task_allocation_id(r["id"]): r for r in await task_queries.fetch_active_tasks(pool)}
    agents = await queries.fetch_agents(pool, AGENT_ALIVE_SECONDS)
    devices = {(a["id"], str(s["id"])): {**(s.get("device") or {}),
                                         "type": s.get("type", "TYPE_CPU"),
                                         "id": _int_or(s["id"], 0)}
               for a in agents for s in a["slots"]}
    names = {a["resource_pool"] for a in agents} | {t["resource_pool"] for t in tasks.values()}
    summaries: dict[str, dict[str, Any]] = {}

    def summary(held: dict[str, Any], pool_name: str) -> dict[str, Any]:
        allocation_id = str(held["allocation_id"])
        holder = _holder(allocation_id, held["experiment_id"], held["trial_id"], tasks)
        return summaries.setdefault(allocation_id, {
            "taskId": holder["taskId"], "allocationId": allocation_id,
            "name": holder["taskName"], "taskType": holder["taskType"],
            "resourcePool": pool_name, "slotsNeeded": held.get("slots", 0),
            "registeredTime": held.get("requested_at") or held.get("granted_at") or None,
            "priority": held.get("priority", DEFAULT_PRIORITY), "schedulerType": "priority",
        })

    for pool_name, view in (await pools.pool_views(temporal, names)).items():
        for held in view.get("allocations", []):
            parts = held.get("parts") or [{"agent_id": held["agent_id"],
                                           "slot_ids": held["slot_ids"]}]
            summary(held, pool_name)["resources"] = [{
                "resourcesId": held["allocation_id"], "resourcesType": "agent",
                "allocationId": held["allocation_id"], "containerId": held["allocation_id"],
                "agentDevices": {part["agent_id"]: {"devices": [
                    devices.get((part["agent_id"], str(i)), {"id": i})
                    for i in part["slot_ids"]]}},
                "started": {}, "exited": None,
            } for part in parts]
        for waiting in view.get("queue", []):
            summary(waiting, pool_name)
    for allocation_id, row in tasks.items():
        summaries.setdefault(allocation_id, {
            "taskId": row["id"], "allocationId": allocation_id,
            "resourcePool": row["resource_pool"], "schedulerType": "priority",
        }).update(
            name=row["description"], slotsNeeded=row["slots"],
            registeredTime=rfc3339(row["created_at"]),
            taskType=f"TASK_TYPE_{row['task_type']}", username=row["username"],
            state=f"STATE_{row['state']}", priority=row["priority"] or DEFAULT_PRIORITY)
    return {"allocationIdToSummary": summaries}


async def _set_enabled(agent_id: str, enabled: bool, pool: Any, temporal: Client) -> None:
    pool_name = await queries.set_agent_enabled(pool, agent_id, enabled)
    if pool_name is None:
        raise not_found("agent", agent_id)
    await pools.signal_scheduler(temporal, pool_name, PoolMessages.SET_AGENT_ENABLED,
                                 AgentEnabled(agent_id=agent_id, enabled=enabled))


@router.post("/api/v1/agents/{agent_id}/enable", **answers(Empty))
async def enable_agent(
    agent_id: str, principal: CurrentPrincipal, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    require_admin(principal, "enable agents")
    await _set_enabled(agent_id, True, pool, temporal)
    return {}


@router.post("/api/v1/agents/{agent_id}/disable", **answers(Empty))
async def disable_agent(
    agent_id: str, principal: CurrentPrincipal, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    """Drain: running trials finish, no new ones start on this agent."""
    require_admin(principal, "disable agents")
    await _set_enabled(agent_id, False, pool, temporal)
    return {}


class DisableSlotRequest(BaseModel):
    """Determined's v1DisableSlotRequest (`det slot disable` sends it empty), and Epochal's
    `reason`, shown by `epochal slot list`. A disabled slot always drains: what runs on it
    finishes, nothing new starts there."""

    agentId: str | None = None
    slotId: str | None = None
    drain: bool | None = None
    reason: str | None = Field(default=None, max_length=500)


async def _slot_changed(agent_id: str, slot_id: str, enabled: bool, reason: str,
                        principal: Any, pool: Any, temporal: Client) -> dict[str, Any]:
    await pools.set_slot_enabled(pool, temporal, agent_id, slot_id, enabled, reason,
                                 principal.username)
    [agent] = await _agents(pool, temporal, agent_id)
    slot = next(s for s in agent["slots"].values() if str(s["id"]) == slot_id)
    return {"slot": slot}


@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/enable", **answers(SlotChanged))
async def enable_slot(
    agent_id: str, slot_id: str, principal: CurrentPrincipal, pool: Pool, temporal: Temporal
) -> dict[str, Any]:
    """Determined's EnableSlot (`det slot enable AGENT SLOT`)."""
    require_admin(principal, "enable slots")
    return await _slot_changed(agent_id, slot_id, True, "", principal, pool, temporal)


@router.post("/api/v1/agents/{agent_id}/slots/{slot_id}/disable", **answers(SlotChanged))
async def disable_slot(
    agent_id: str, slot_id: str, principal: CurrentPrincipal, pool: Pool, temporal: Temporal,
    body: DisableSlotRequest | None = None,
) -> dict[str, Any]:
    """Determined's DisableSlot (`det slot disable AGENT SLOT`): the slot drains."""
    require_admin(principal, "disable slots")
    body = body or DisableSlotRequest()
    for field, value, path in (("agentId", body.agentId, agent_id),
                               ("slotId", body.slotId, slot_id)):
        if value not in (None, "", path):
            raise ApiError(400, f"{field} does not match the path",
                           [f"{field}: is {value!r}, but the path names {path!r}"])
    reason = (body.reason or "").strip() or f"disabled by {principal.username or 'an admin'}"
    return await _slot_changed(agent_id, slot_id, False, reason, principal, pool, temporal)


@router.get("/api/v1/job-queues", **answers(JobQueue))
async def job_queue(
    pool: Pool,
    temporal: Temporal,
    settings: AppSettings,
    resourcePool: str | None = Query(default=None),  # noqa: N803 (Determined's name)
) -> dict[str, Any]:
    """Experiments and interactive tasks holding or waiting for slots, in the order the
    scheduler serves them."""
    jobs = await pools.job_queue(pool, temporal, settings.resource_pools, resourcePool)
    return {"jobs": jobs, "pagination": {"offset": 0, "limit": len(jobs), "total": len(jobs)}}

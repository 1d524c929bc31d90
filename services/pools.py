"""The resource pools' schedulers (`ResourcePoolWorkflow`) as the API asks and tells them: what a
pool holds and queues (its `describe` query), whether a request could ever fit (`check_request`),
the job queue Determined's clients show, and the signals the API sends a pool."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError

from activities.pool_start import signal_pool
from common.states import TaskState
from common.temporal_names import PoolMessages, resource_pool_workflow_id
from services.errors import Unavailable
from wire.pools import SlotRequest

__all__ = ["describe_pool", "job_id", "job_queue", "never_fits", "pool_names", "pool_views",
           "signal_pool", "signal_scheduler"]


async def describe_pool(temporal: Client, pool_name: str) -> dict[str, Any] | None:
    """The pool scheduler's `describe` answer; None if it does not run (or does not answer)."""
    handle = temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
    try:
        answer: dict[str, Any] = await asyncio.wait_for(handle.query(PoolMessages.DESCRIBE), 10)
    except Exception:  # not started yet, or busy: show what the database has
        return None
    return answer


async def pool_views(temporal: Client, names: set[str]) -> dict[str, dict[str, Any]]:
    """`describe_pool` of each pool that answers, by name."""
    ordered = sorted(names)
    answers = await asyncio.gather(*(describe_pool(temporal, n) for n in ordered))
    return {n: a for n, a in zip(ordered, answers, strict=True) if a is not None}


async def never_fits(temporal: Client, resources: dict[str, Any]) -> str | None:
    """Why the config's resource pool could never hold one of its trials (the pool's
    `check_request` query); None if it could, or if the pool does not answer (not started)."""
    pool_name = str(resources.get("resource_pool") or "default")
    request = SlotRequest(allocation_id="", workflow_id="", experiment_id=0, trial_id=0,
                          slots=int(resources.get("slots_per_trial") or 0),
                          max_slots=resources.get("max_slots"))
    handle = temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
    try:
        answer = await asyncio.wait_for(handle.query(PoolMessages.CHECK_REQUEST, request), 2)
    except Exception:  # not started yet, busy, or an older pool without the query
        return None
    return str(answer) if answer else None


async def signal_scheduler(temporal: Client, pool_name: str, signal: str, message: object) -> None:
    """`signal_pool` (which starts the pool's scheduler if it does not run), refused as
    Unavailable when Temporal cannot be reached."""
    try:
        await signal_pool(temporal, pool_name, signal, message)
    except RPCError as err:
        raise Unavailable(f"cannot reach the scheduler: {err.message}") from err


async def pool_names(pool: asyncpg.Pool, configured: tuple[str, ...]) -> list[str]:
    """The configured pools and those agents registered in, sorted."""
    registered = {r["resource_pool"] for r in await pool.fetch(
        "SELECT DISTINCT resource_pool FROM agents")}
    return sorted(set(configured) | registered)


async def job_queue(pool: asyncpg.Pool, temporal: Client, configured: tuple[str, ...],
                    resource_pool: str | None) -> list[dict[str, Any]]:
    """Experiments' and interactive tasks' jobs holding or waiting for slots in `resource_pool`
    (else in every pool), in the order the schedulers serve them."""
    names = {resource_pool} if resource_pool else set(await pool_names(pool, configured))
    views = await pool_views(temporal, names)
    task_types = {r["id"]: r["task_type"] for r in await pool.fetch(
        "SELECT id, task_type FROM tasks WHERE state <> $1", TaskState.TERMINATED)}
    return [j for name in sorted(views) for j in _jobs_of(name, views[name], task_types)]


def job_id(experiment_id: int) -> str:
    """An experiment's job in the job queue (GET /job-queues)."""
    return f"experiment-{experiment_id}"


def _jobs_of(pool_name: str, view: dict[str, Any],
             task_types: dict[str, str]) -> list[dict[str, Any]]:
    """One job per experiment, and one per interactive task (its requests name experiment 0;
    `task_types` gives the tasks' types by id): slots held and wanted, in the order the
    scheduler serves them."""
    by_job: dict[str, dict[str, Any]] = {}

    def job(entry: dict[str, Any]) -> dict[str, Any]:
        experiment_id, task_id = entry["experiment_id"], entry["allocation_id"].rsplit(".", 1)[0]
        key, job_type, entity = (
            (job_id(experiment_id), "TYPE_EXPERIMENT", str(experiment_id)) if experiment_id
            else (task_id, f"TYPE_{task_types.get(task_id, 'GENERIC')}", task_id))
        return by_job.setdefault(key, {
            "jobId": key, "type": job_type, "entityId": entity,
            "resourcePool": pool_name, "priority": entry["priority"], "allocatedSlots": 0,
            "requestedSlots": 0, "runningTrials": 0, "queuedTrials": 0, "firstQueued": None,
        })

    for a in view.get("allocations", []):
        j = job(a)
        j["allocatedSlots"] += a["slots"]
        j["runningTrials"] += 1
    for i, r in enumerate(view.get("queue", [])):
        j = job(r)
        j["requestedSlots"] += r["slots"]
        j["queuedTrials"] += 1
        if r.get("waiting") and "waiting" not in j:  # larger than the pool as it is now
            j["waiting"] = r["waiting"]
        if j["firstQueued"] is None:
            j["firstQueued"] = i
    ordered = sorted(by_job.values(), key=lambda j: (
        j["firstQueued"] is not None, j["firstQueued"] or 0, j["priority"],
        j["type"] != "TYPE_EXPERIMENT", int(j["entityId"]) if j["entityId"].isdigit() else 0,
        j["entityId"]))
    for ahead, j in enumerate(ordered):
        state = "STATE_QUEUED" if j["runningTrials"] == 0 else "STATE_SCHEDULED"
        j["summary"] = {"state": state, "jobsAhead": ahead}
        del j["firstQueued"]
    return ordered

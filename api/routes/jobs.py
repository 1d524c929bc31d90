"""Determined's job queue and resource pools as `det job list` and `det resource-pool list` read
them: the pools' schedulers (`ResourcePoolWorkflow.describe`) joined with the experiments and
the interactive tasks behind the jobs.

The queue itself is computed once, in services/pools.py (`GET /job-queues` answers it as it
is); this module gives it Determined's v2 shape (`GET /job-queues-v2`) and lets `det job update`
change an experiment's job (`POST /job-queues`): its priority or weight, its place in the queue,
its pool.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from api import views
from api.auth import require_owner
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError
from api.queries import jobs as queries
from api.queries import tasks as task_queries
from api.schemas import Empty, answers
from api.schemas.jobs import JobListV2, ResourcePoolList
from services import experiment_settings, pools

router = APIRouter(prefix="/api/v1", tags=["jobs"])


@router.get("/resource-pools", **answers(ResourcePoolList))
async def list_resource_pools(
    pool: Pool,
    temporal: Temporal,
    settings: AppSettings,
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetResourcePools: static pools with a priority scheduler, best fit."""
    names = await pools.pool_names(pool, settings.resource_pools)
    found = []
    for name in names:
        view = await pools.describe_pool(temporal, name) or {}
        agents = [a for a in view.get("agents", []) if a.get("alive")]
        used = sum(int(a.get("slots") or 0) for a in view.get("allocations", []))
        preemption = bool((view.get("policy") or {}).get("preemption", False))
        found.append(_resource_pool_json(
            name, default=name == settings.resource_pools[0], agents=len(agents),
            slots=sum(len(a["slotIds"]) for a in agents), used=used, preemption=preemption))
    page = found[offset:offset + limit] if limit else found[offset:]
    return {"resourcePools": page,
            "pagination": views.pagination(offset, limit or len(found), len(page), len(found))}


def _resource_pool_json(
    name: str, *, default: bool, agents: int, slots: int, used: int, preemption: bool
) -> dict[str, Any]:
    """Determined's v1ResourcePool; the cloud provisioning fields answer empty."""
    return {
        "name": name, "description": "", "type": "RESOURCE_POOL_TYPE_STATIC",
        "numAgents": agents, "slotsAvailable": slots, "slotsUsed": used,
        "slotType": "TYPE_CPU", "auxContainerCapacity": 0, "auxContainersRunning": 0,
        "defaultComputePool": default, "defaultAuxPool": default, "preemptible": preemption,
        "minAgents": 0, "maxAgents": 0, "slotsPerAgent": None, "auxContainerCapacityPerAgent": 0,
        "schedulerType": "SCHEDULER_TYPE_PRIORITY", "schedulerFittingPolicy": "FITTING_POLICY_BEST",
        "location": "on-prem", "imageId": "", "instanceType": "", "masterUrl": "",
        "masterCertName": "", "startupScript": "", "containerStartupScript": "",
        "agentDockerNetwork": "host", "agentDockerRuntime": "", "agentDockerImage": "",
        "agentFluentImage": "", "maxIdleAgentPeriod": 0, "maxAgentStartingPeriod": 0,
        "details": {"priorityScheduler": {"preemption": preemption, "defaultPriority": 42}},
        "accelerator": "", "resourceManagerMetadata": {}, "clusterName": "",
    }


@router.get("/job-queues-v2", **answers(JobListV2))
async def job_queue_v2(
    request: Request,
    pool: Pool,
    temporal: Temporal,
    settings: AppSettings,
    resourcePool: str | None = Query(default=None),  # noqa: N803 (Determined's name)
    orderBy: str = "ORDER_BY_ASC",  # noqa: N803
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Determined's GetJobsV2 (`det job list`): each job in full, in the order it is served;
    an experiment's or an interactive task's."""
    jobs = await pools.job_queue(pool, temporal, settings.resource_pools, resourcePool)
    experiments = {r["id"]: r for r in await queries.fetch_job_experiments(
        pool, [int(j["entityId"]) for j in jobs if j["type"] == "TYPE_EXPERIMENT"])}
    tasks = {r["id"]: r for r in await task_queries.fetch_active_tasks(pool)}
    full = []
    for job in jobs:
        if job["type"] == "TYPE_EXPERIMENT":
            row = experiments.get(int(job["entityId"]))
            about = None if row is None else {
                "name": row["name"], "username": row["owner"], "userId": row["uid"],
                "submissionTime": views.rfc3339(row["start_time"]),
                "workspaceId": row["workspace_id"],
                "weight": (row["resources"] or {}).get("weight")}
        else:
            task = tasks.get(job["entityId"])
            about = None if task is None else {
                "name": task["description"], "username": task["username"],
                "userId": task["owner_id"], "submissionTime": views.rfc3339(task["created_at"]),
                "workspaceId": task["workspace_id"], "weight": None}
        if about is None:
            continue  # deleted, or over, while it still held slots
        weight = about.pop("weight")
        full.append({"full": {
            **job, **about,
            "isPreemptible": True,
            "weight": float(weight) if isinstance(weight, int | float) else 1.0,
        }})
    if orderBy == "ORDER_BY_DESC":
        full.reverse()
    page = full[offset:offset + limit] if limit else full[offset:]
    return {"jobs": page,
            "pagination": views.pagination(offset, limit or len(full), len(page), len(full))}


class QueueControl(BaseModel):
    jobId: str
    priority: int | None = None
    weight: float | None = None
    resourcePool: str | None = Field(None, max_length=200)
    aheadOf: str | None = None
    behindOf: str | None = None


class UpdateJobQueueRequest(BaseModel):
    updates: list[QueueControl] = Field(max_length=100)


@router.post("/job-queues", **answers(Empty))
async def update_job_queue(
    body: UpdateJobQueueRequest, request: Request, pool: Pool, temporal: Temporal,
    settings: AppSettings,
) -> dict[str, Any]:
    """Determined's UpdateJobQueue (`det job update`): an experiment's job's priority and
    weight, its pool, or its place ahead of or behind another job (of the pool it is in
    then)."""
    for update in body.updates:
        experiment_id = _experiment_of(update.jobId)
        if update.aheadOf and update.behindOf:
            raise ApiError(400, "a job goes ahead of another or behind it, not both",
                           ["aheadOf, behindOf: give one"])
        await require_owner(request, experiment_id, "change")
        await experiment_settings.change_resources(
            pool, temporal, experiment_id, priority=update.priority, max_slots=None,
            weight=update.weight)
        if update.resourcePool:
            await experiment_settings.move_to_pool(
                pool, temporal, settings.resource_pools, experiment_id, update.resourcePool)
        for field, anchor, ahead in (("aheadOf", update.aheadOf, True),
                                     ("behindOf", update.behindOf, False)):
            if anchor:
                await experiment_settings.move_job(
                    pool, temporal, experiment_id, anchor_id=_experiment_of(anchor, field),
                    ahead=ahead, field=field)
    return {}


def _experiment_of(job_id: str, field: str = "jobId") -> int:
    prefix = "experiment-"
    number = job_id.removeprefix(prefix)
    if not job_id.startswith(prefix) or not number.isdigit() or len(number) > 9:
        raise ApiError(400, "bad job id", [
            f"{field}: experiment-<id>, got {job_id[:80]!r} (an interactive task's priority is"
            " set with `det cmd|notebook|shell|tensorboard set priority`)"])
    return int(number)

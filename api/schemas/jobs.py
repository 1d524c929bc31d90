"""The job queue and the resource pools."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class JobSummary(Answer):
    """Determined's v1JobSummary."""

    state: str
    jobsAhead: int


class Job(Answer):
    """Determined's v1Job: an experiment's trials, or an interactive task, holding and waiting
    for slots."""

    jobId: str
    type: str
    entityId: str
    resourcePool: str
    priority: int
    allocatedSlots: int  # held
    requestedSlots: int  # needed, those held included (Determined's "acquired/needed")
    runningTrials: int | None  # None for an interactive task: it has no trials
    queuedTrials: int | None
    submissionTime: str | None
    summary: JobSummary
    waiting: str | None = None  # what its first request in the queue waits for; None if none


class JobQueue(Answer):
    """Determined's v1GetJobsResponse."""

    jobs: list[Job]
    pagination: Pagination


class JobV2(Job):
    """Determined's v1JobV2."""

    name: str
    username: str
    userId: int
    workspaceId: int
    isPreemptible: bool
    weight: float


class RBACJob(Answer):
    """Determined's v1RBACJob (Epochal answers every job in full)."""

    full: JobV2


class JobListV2(Answer):
    """Determined's v1GetJobsV2Response."""

    jobs: list[RBACJob]
    pagination: Pagination


class ResourcePool(Answer):
    """Determined's v1ResourcePool."""

    name: str
    description: str
    type: str
    numAgents: int
    slotsAvailable: int
    slotsUsed: int
    slotType: str
    auxContainerCapacity: int
    auxContainersRunning: int
    defaultComputePool: bool
    defaultAuxPool: bool
    preemptible: bool
    minAgents: int
    maxAgents: int
    slotsPerAgent: int | None
    auxContainerCapacityPerAgent: int
    schedulerType: str
    schedulerFittingPolicy: str
    location: str
    imageId: str
    instanceType: str
    masterUrl: str
    masterCertName: str
    startupScript: str
    containerStartupScript: str
    agentDockerNetwork: str
    agentDockerRuntime: str
    agentDockerImage: str
    agentFluentImage: str
    maxIdleAgentPeriod: int
    maxAgentStartingPeriod: int
    details: dict[str, Any]
    accelerator: str
    resourceManagerMetadata: dict[str, Any]
    clusterName: str


class ResourcePoolList(Answer):
    """Determined's v1GetResourcePoolsResponse."""

    resourcePools: list[ResourcePool]
    pagination: Pagination

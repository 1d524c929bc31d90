"""Running tasks: their allocations and preemption."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer


class AllocationResources(Answer):
    """Determined's v1ResourcesSummary."""

    resourcesId: str
    resourcesType: str
    allocationId: str
    containerId: str
    agentDevices: dict[str, dict[str, list[dict[str, Any]]]]
    started: dict[str, Any]
    exited: dict[str, Any] | None


class AllocationSummary(Answer):
    """Determined's v1AllocationSummary: `resources` only once slots are granted (`det task
    list` shows "unassigned" without them)."""

    taskId: str
    allocationId: str
    name: str
    resourcePool: str
    slotsNeeded: int
    registeredTime: str | None
    priority: int
    resources: list[AllocationResources] | None = None
    schedulerType: str


class TaskList(Answer):
    """Determined's v1GetTasksResponse."""

    allocationIdToSummary: dict[str, AllocationSummary]


class PreemptionSignal(Answer):
    """Determined's v1AllocationPreemptionSignalResponse."""

    preempt: bool

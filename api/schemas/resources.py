"""The allocation history's reports: Determined's v1ResourceAllocationRawResponse and
v1ResourceAllocationAggregatedResponse, with Epochal's fields beside Determined's."""

from __future__ import annotations

from api.schemas import Answer


class RawAllocation(Answer):
    """Determined's v1ResourceAllocationRawEntry: one allocation, `seconds` held within the
    window; Epochal adds where it ran and for whom."""

    kind: str
    startTime: str
    endTime: str | None
    experimentId: int | None
    username: str
    userId: int | None
    labels: list[str]
    seconds: float
    slots: int
    allocationId: str
    taskId: str
    taskType: str
    trialId: int | None
    workspaceId: int | None
    workspaceName: str | None
    resourcePool: str
    agentIds: list[str]


class RawAllocations(Answer):
    resourceEntries: list[RawAllocation]


class AggregatedAllocation(Answer):
    """Determined's v1ResourceAllocationAggregatedEntry: slot-seconds within one period, in
    all and by user, experiment label and pool; `byWorkspace` is Epochal's."""

    periodStart: str
    period: str
    seconds: float
    byUsername: dict[str, float]
    byExperimentLabel: dict[str, float]
    byResourcePool: dict[str, float]
    byWorkspace: dict[str, float]


class AggregatedAllocations(Answer):
    resourceEntries: list[AggregatedAllocation]

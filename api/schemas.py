"""The answers' shapes, for the OpenAPI schema: what api/views.py builds, field by field.

Routes build their JSON in views.py; these models only document it (`responses=` on the routes,
no filtering), and tests/integration/test_openapi_shapes.py checks real answers against them so
the schema stays true. Extra fields are allowed: Determined's client reads more than is listed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class Pagination(_Shape):
    offset: int
    limit: int
    total: int


class Workload(_Shape):
    """A trial's validation report, as Determined's MetricsWorkload plus Epochal's fields."""

    group: str
    stepsCompleted: int
    trialRunId: int
    reportTime: str | None
    metrics: dict[str, Any]
    totalBatches: int


class Experiment(_Shape):
    id: int
    name: str
    description: str
    notes: str
    labels: list[str]
    state: str
    searcherType: str
    searcherMetric: str | None
    smallerIsBetter: bool
    startTime: str | None
    endTime: str | None
    progress: float | None
    numTrials: int
    trialIds: list[int] | None = None  # the experiment's own answer only, not lists
    trialStates: dict[str, int]
    bestTrialId: int | None
    bestValidation: float | None
    archived: bool
    username: str
    resourcePool: str
    config: dict[str, Any]
    originalConfig: str
    jobId: str
    projectId: int


class Trial(_Shape):
    id: int
    experimentId: int
    requestId: int
    state: str
    hparams: dict[str, Any]
    seed: int
    startTime: str | None
    endTime: str | None
    restarts: int
    runId: int
    totalBatchesProcessed: int
    progress: float | None
    latestValidation: Workload | None
    bestValidation: Workload | None
    searcherMetricValue: float | None
    latestCheckpointUuid: str | None
    taskId: str
    agentId: str | None
    earlyExitReason: str | None
    rung: int | None
    searcherStatus: str | None


class CheckpointTraining(_Shape):
    trialId: int
    experimentId: int
    hparams: dict[str, Any]
    validationMetrics: dict[str, Any] | None
    searcherMetric: float | None


class Checkpoint(_Shape):
    uuid: str
    taskId: str
    allocationId: str
    reportTime: str | None
    resources: dict[str, int]
    metadata: dict[str, Any]
    state: str
    storagePath: str
    training: CheckpointTraining


class User(_Shape):
    id: int
    username: str
    displayName: str
    admin: bool
    active: bool


class ExperimentList(_Shape):
    experiments: list[Experiment]
    pagination: Pagination


class ExperimentAnswer(_Shape):
    experiment: Experiment
    config: dict[str, Any]


class TrialList(_Shape):
    trials: list[Trial]
    pagination: Pagination


class TrialAnswer(_Shape):
    trial: Trial


class CheckpointList(_Shape):
    checkpoints: list[Checkpoint]


class CheckpointAnswer(_Shape):
    checkpoint: Checkpoint


class UserAnswer(_Shape):
    user: User


class UserList(_Shape):
    users: list[User]
    pagination: Pagination


class LoginAnswer(_Shape):
    token: str
    user: User


def documented(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route whose 200 answer has `model`'s shape."""
    return {200: {"model": model, "description": "Successful Response"}}

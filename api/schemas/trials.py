"""Trials, their workloads and their metric reports."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class MetricReport(Answer):
    """One metrics row of a trial: a group's report at a step (Epochal's)."""

    group: str
    stepsCompleted: int
    trialRunId: int
    reportTime: str | None
    metrics: dict[str, Any]


class Workload(MetricReport):
    """A trial's validation report, as Determined's MetricsWorkload plus Epochal's fields."""

    totalBatches: int


class Trial(Answer):
    """Determined's trialv1Trial."""

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
    workflowId: str | None = None  # its workflow in Temporal (Epochal's)


class TrialList(Answer):
    """Determined's v1GetExperimentTrialsResponse."""

    trials: list[Trial]
    pagination: Pagination


class TrialAnswer(Answer):
    """Determined's v1GetTrialResponse."""

    trial: Trial


class MetricsBatchAnswer(Answer):
    """How many reports of a batch were stored, and whether the searcher stopped the trial."""

    stored: int
    preempt: bool


class MetricsWorkload(Answer):
    """Determined's v1MetricsWorkload."""

    totalBatches: int
    endTime: str | None
    numInputs: int
    metrics: dict[str, Any]


class CheckpointWorkload(Answer):
    """Determined's v1CheckpointWorkload."""

    uuid: str
    totalBatches: int
    endTime: str | None
    state: str
    metadata: dict[str, Any]
    resources: dict[str, int]


class WorkloadContainer(Answer):
    """Determined's v1WorkloadContainer: one of a training, validation or checkpoint report."""

    training: MetricsWorkload | None = None
    validation: MetricsWorkload | None = None
    checkpoint: CheckpointWorkload | None = None


class WorkloadList(Answer):
    """Determined's v1GetTrialWorkloadsResponse."""

    workloads: list[WorkloadContainer]
    pagination: Pagination


class DataPoint(Answer):
    """Determined's v1DataPoint."""

    batches: int
    time: str | None
    epoch: float | None
    values: dict[str, Any]


class DownsampledMetrics(Answer):
    """Determined's v1DownsampledMetrics: one group's series of a trial."""

    group: str
    type: str
    data: list[DataPoint]


class ComparableTrial(Answer):
    """Determined's v1ComparableTrial."""

    trial: Trial
    metrics: list[DownsampledMetrics]


class CompareTrialsAnswer(Answer):
    """Determined's v1CompareTrialsResponse."""

    trials: list[ComparableTrial]


class MetricReportList(Answer):
    """A trial's metric reports (Epochal's `GET /trials/{id}/metrics`)."""

    metrics: list[MetricReport]


class CleanupLogsAnswer(Answer):
    """Determined's v1CleanupLogsResponse: how many log lines were deleted (an int64 as text)."""

    removedCount: str


class TrialUserSession(Answer):
    """A session of the trial's owner for its run's code (Determined's DET_USER_TOKEN)."""

    userToken: str
    username: str

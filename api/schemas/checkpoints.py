"""Checkpoints, and the presigned URLs their S3 files go up and come down through."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class CheckpointTraining(Answer):
    """Determined's v1CheckpointTrainingMetadata."""

    trialId: int
    experimentId: int
    hparams: dict[str, Any]
    validationMetrics: dict[str, Any] | None
    searcherMetric: float | None


class Checkpoint(Answer):
    """Determined's v1Checkpoint."""

    uuid: str
    taskId: str
    allocationId: str
    reportTime: str | None
    resources: dict[str, int]
    metadata: dict[str, Any]
    state: str
    storagePath: str
    training: CheckpointTraining


class CheckpointList(Answer):
    """Determined's v1GetTrialCheckpointsResponse (and v1GetExperimentCheckpointsResponse)."""

    checkpoints: list[Checkpoint]
    pagination: Pagination


class CheckpointAnswer(Answer):
    """Determined's v1GetCheckpointResponse."""

    checkpoint: Checkpoint


class FileUpload(Answer):
    """How one file goes up: a presigned PUT (`url`), or a multipart upload's presigned part
    PUTs (`uploadId`, `partSize`, `parts`)."""

    path: str
    url: str | None = None
    uploadId: str | None = None
    partSize: int | None = None
    parts: list[str] | None = None


class UploadPlan(Answer):
    files: list[FileUpload]


class FileDownload(Answer):
    path: str
    size: int
    url: str


class DownloadPlan(Answer):
    files: list[FileDownload]


class GcPreview(Answer):
    """What `preview_gc` answers: the checkpoints a GC policy would delete, as Determined's
    master sends its checkpoint rows (Go field names: `UUID`, `TrialID`, ...), and the
    searcher's metric."""

    checkpoints: list[dict[str, Any]]
    metric_name: str

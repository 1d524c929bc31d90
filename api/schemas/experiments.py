"""Experiments, their model definitions and their hyperparameters' importance."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class Experiment(Answer):
    """Determined's v1Experiment, with Epochal's `trialStates`."""

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
    errorMessage: str | None = None  # the experiment's own error (its sampler failed)
    bestTrialId: int | None
    bestValidation: float | None
    archived: bool
    username: str
    resourcePool: str
    config: dict[str, Any]
    originalConfig: str
    jobId: str
    projectId: int
    workflowId: str | None = None  # its workflow in Temporal (Epochal's)
    importedFrom: ImportedFrom | None = None  # Epochal's: the cluster it was imported from


class ImportedFrom(Answer):
    """Where an imported experiment came from (services/history_import/)."""

    kind: str
    url: str
    experimentId: str


class UnsavedExperiment(Answer):
    """The placeholder experiment a validate-only create answers (`det e create --test`)."""

    id: int
    name: str
    description: str
    labels: list[str]
    state: str
    searcherType: str
    startTime: str
    numTrials: int
    archived: bool
    username: str
    config: dict[str, Any]
    originalConfig: str
    jobId: str
    projectId: int


class ExperimentList(Answer):
    """Determined's v1GetExperimentsResponse."""

    experiments: list[Experiment]
    pagination: Pagination


class ExperimentAnswer(Answer):
    """Determined's v1GetExperimentResponse."""

    experiment: Experiment
    config: dict[str, Any]


class ExperimentCreated(Answer):
    """Determined's v1CreateExperimentResponse, with Epochal's `configWarnings`."""

    experiment: Experiment | UnsavedExperiment
    config: dict[str, Any]
    warnings: list[str]
    configWarnings: list[str]


class PatchedExperiment(Answer):
    """Determined's v1PatchExperimentResponse; a continued experiment is answered alike."""

    experiment: Experiment


class ModelDefinition(Answer):
    """Determined's v1GetModelDefResponse."""

    b64Tgz: str


class FileNode(Answer):
    """Determined's v1FileNode."""

    path: str
    name: str
    isDir: bool
    contentLength: int
    contentType: str
    modifiedTime: str | None
    files: list[FileNode]


class ModelDefinitionTree(Answer):
    """Determined's v1GetModelDefTreeResponse."""

    files: list[FileNode]


class ModelDefinitionFile(Answer):
    """Determined's v1GetModelDefFileResponse."""

    file: str


class HyperparameterImportance(Answer):
    """Each hyperparameter's share of the searcher metric's variance, largest first (Epochal's):
    `method` names how (fANOVA), `spread` is each share's standard deviation over `resamples`
    bootstrap resamples of the `trials`."""

    metric: str
    trials: int
    method: str
    resamples: int
    importance: dict[str, float]
    spread: dict[str, float]


class BestSearcherValidation(Answer):
    """Determined's GetBestSearcherValidationMetricResponse."""

    metric: float


class SearchUnit(Answer):
    """Determined's v1SearchUnit: a length (`name`, `value`), or the whole `maxLength`."""

    maxLength: bool
    name: str | None = None
    value: int | None = None


class TrialSummary(Answer):
    """Determined's v1TrialSummary: `count` trials train for `unit`."""

    count: int
    unit: SearchUnit


class SearchSummary(Answer):
    config: dict[str, Any]
    trials: list[TrialSummary]


class SearchPreview(Answer):
    """Determined's v1PreviewHPSearchResponse (`det preview-search`)."""

    summary: SearchSummary

"""The fields of Determined 0.38's JSON objects that an import reads, each bounded.

Items arrive as the source answered them (grpc-gateway's camelCase; int64 as strings, which
pydantic's lax mode reads as numbers; fields Epochal does not keep are ignored). `parse` turns a
model's refusal into a 400 naming the item and field."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, TypeVar
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from services.errors import Invalid

MAX_ITEMS = 500  # items in one POST of a kind
MAX_REPORTS = 20_000  # metric reports or log lines in one POST
MAX_TEXT = 64 * 1024  # descriptions, comments, log lines
MAX_NOTES = 100_000  # an experiment's notes (PATCH /experiments takes as much)
MAX_JSON_BYTES = 64 * 1024  # a metadata mapping, hyperparameters, one report's metrics
MAX_JSON_DEPTH = 32
MAX_LABELS = 1000
# A model definition: 96 MiB, as a submission's, in base64.
MAX_MODEL_DEFINITION = 96 * 1024 * 1024
MAX_MODEL_DEFINITION_B64 = (MAX_MODEL_DEFINITION + 2) // 3 * 4

Name = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
Short = Annotated[str, StringConstraints(max_length=1000)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
Labels = Annotated[list[Short], Field(max_length=MAX_LABELS)]


def json_problem(value: Any, limit: int = MAX_JSON_BYTES) -> str | None:
    """Why a JSON value is over the bounds (its size once serialised, its nesting), or None."""
    def depth(node: Any, level: int) -> int:
        if level > MAX_JSON_DEPTH:
            return level
        children = (node.values() if isinstance(node, dict) else
                    node if isinstance(node, list) else ())
        return max((depth(child, level + 1) for child in children), default=level)

    if depth(value, 0) > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    size = len(json.dumps(value, separators=(",", ":")))
    return f"{size:,} bytes of JSON, more than {limit:,}" if size > limit else None


def _bounded_json(limit: int) -> Any:
    def check(value: Any) -> Any:
        problem = json_problem(value, limit)
        if problem is not None:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


Metadata = Annotated[dict[str, Any], _bounded_json(MAX_JSON_BYTES)]
# A whole experiment config: load_config_yaml bounds its text again when it is checked.
ConfigMapping = Annotated[dict[str, Any], _bounded_json(4 * MAX_JSON_BYTES)]


class Item(BaseModel):
    """A source object: the fields read, the others ignored."""

    model_config = ConfigDict(extra="ignore")


class User(Item):
    """v1User."""

    id: int
    username: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    displayName: Short | None = None
    admin: bool = False
    active: bool = True
    modifiedAt: datetime | None = None


class Workspace(Item):
    """v1Workspace."""

    id: int
    name: Name
    archived: bool = False
    username: Short | None = None
    immutable: bool = False
    defaultComputePool: Short | None = None
    defaultAuxPool: Short | None = None


class Note(Item):
    """One of a project's notes (v1Note)."""

    name: Short = ""
    contents: Annotated[str, StringConstraints(max_length=MAX_NOTES)] = ""


class Project(Item):
    """v1Project."""

    id: int
    name: Name
    workspaceId: int
    description: Text | None = None
    notes: Annotated[list[Note], Field(max_length=100)] = []
    archived: bool = False
    username: Short | None = None
    key: Annotated[str, StringConstraints(max_length=64)] | None = None


class Template(Item):
    """v1Template."""

    name: Name
    config: ConfigMapping
    workspaceId: int = 1


class Experiment(Item):
    """v1Experiment, as GET /api/v1/experiments/{id} answers it."""

    id: int
    name: Name
    description: Text | None = None
    labels: Labels = []
    notes: Annotated[str, StringConstraints(max_length=MAX_NOTES)] | None = None
    state: Short
    archived: bool = False
    projectId: int = 1
    username: Short
    startTime: datetime
    endTime: datetime | None = None
    forkedFrom: int | None = None
    parentId: int | None = None  # the contract's other name for it
    unmanaged: bool = False
    originalConfig: Annotated[str, StringConstraints(max_length=4 * MAX_JSON_BYTES)] | None = None


class ExperimentItem(Item):
    """What the importer sends of one experiment: it, its config and its model definition."""

    experiment: Experiment
    config: ConfigMapping
    modelDefinition: Annotated[
        str, StringConstraints(max_length=MAX_MODEL_DEFINITION_B64)] | None = None


class Trial(Item):
    """v1Trial, as GET /api/v1/experiments/{id}/trials lists it."""

    id: int
    experimentId: int
    hparams: Metadata = {}
    state: Short
    restarts: int = Field(0, ge=0)
    startTime: datetime
    endTime: datetime | None = None
    totalBatchesProcessed: int = Field(0, ge=0)
    searcherMetricValue: float | None = None
    logRetentionDays: int | None = Field(None, ge=-1, le=32767)


class CheckpointTraining(Item):
    """v1CheckpointTrainingMetadata: whose checkpoint it is."""

    trialId: int | None = None
    experimentId: int | None = None


class Checkpoint(Item):
    """v1Checkpoint, as GET /api/v1/experiments/{id}/checkpoints lists it."""

    uuid: UUID
    reportTime: datetime | None = None
    resources: Annotated[dict[Annotated[str, StringConstraints(max_length=4096)],
                              Annotated[int, Field(ge=0)]],
                         Field(max_length=100_000)] = {}
    metadata: Metadata = {}
    state: Short = "STATE_COMPLETED"
    training: CheckpointTraining = CheckpointTraining()


class Model(Item):
    """v1Model."""

    id: int
    name: Name
    description: Text | None = None
    notes: Text | None = None
    metadata: Metadata = {}
    labels: Labels = []
    username: Short | None = None
    workspaceId: int = 1
    archived: bool = False
    creationTime: datetime | None = None
    lastUpdatedTime: datetime | None = None


class ModelRef(Item):
    id: int


class CheckpointRef(Item):
    uuid: UUID


class ModelVersion(Item):
    """v1ModelVersion."""

    id: int
    model: ModelRef
    version: int = Field(ge=1)
    checkpoint: CheckpointRef
    name: Short | None = None
    comment: Text | None = None
    notes: Text | None = None
    metadata: Metadata = {}
    labels: Labels = []
    username: Short | None = None
    creationTime: datetime | None = None
    lastUpdatedTime: datetime | None = None


class MetricsReport(Item):
    """v1MetricsReport, one object of Determined's trial_metrics stream."""

    trialId: int | None = None
    endTime: datetime | None = None
    metrics: Metadata = {}
    totalBatches: int = Field(0, ge=0)
    trialRunId: int = Field(0, ge=0)
    archived: bool = False
    group: Short | None = None


class TrialLog(Item):
    """v1TrialLogsResponse, one `result` of Determined's trial logs stream."""

    id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | int | None = None
    trialId: int | None = None
    timestamp: datetime | None = None
    message: Text | None = None
    log: Text | None = None
    level: Short | None = None
    stdtype: Short | None = None
    agentId: Short | None = None


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: Any, where: str) -> M:
    """`raw` read as `model`; a 400 naming each refused field under `where`."""
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        details = []
        for error in err.errors()[:20]:
            path = ".".join(str(part) for part in error["loc"])
            details.append(f"{where}.{path}: {error['msg']}" if path else f"{where}: "
                           f"{error['msg']}")
        raise Invalid(f"invalid {model.__name__} in {where}", details) from None

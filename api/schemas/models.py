"""Answers of the model registry's routes."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination
from api.schemas.checkpoints import Checkpoint


class Model(Answer):
    """Determined's v1Model."""

    id: int
    name: str
    description: str
    notes: str
    metadata: dict[str, Any]
    labels: list[str]
    creationTime: str
    lastUpdatedTime: str
    numVersions: int
    username: str
    userId: int
    archived: bool
    workspaceId: int
    latestVersion: int | None = None  # Epochal's: the highest version number, None without one


class ModelVersion(Answer):
    """Determined's v1ModelVersion."""

    id: int
    version: int
    model: Model
    checkpoint: Checkpoint
    name: str
    comment: str
    notes: str
    metadata: dict[str, Any]
    labels: list[str]
    creationTime: str
    lastUpdatedTime: str
    username: str
    userId: int


class ModelList(Answer):
    """Determined's v1GetModelsResponse."""

    models: list[Model]
    pagination: Pagination


class ModelAnswer(Answer):
    """Determined's v1GetModelResponse (and those of PostModel and PatchModel)."""

    model: Model


class ModelLabels(Answer):
    """Determined's v1GetModelLabelsResponse."""

    labels: list[str]


class ModelVersionList(Answer):
    """Determined's v1GetModelVersionsResponse."""

    model: Model
    modelVersions: list[ModelVersion]
    pagination: Pagination


class ModelVersionAnswer(Answer):
    """Determined's v1GetModelVersionResponse (and those of PostModelVersion and
    PatchModelVersion)."""

    modelVersion: ModelVersion


class ModelAlias(Answer):
    """Epochal's (MLflow's aliases): a name pointing at one version of the model."""

    alias: str
    version: int
    username: str
    lastUpdatedTime: str


class ModelAliases(Answer):
    """Epochal's: the model's aliases by name."""

    aliases: list[ModelAlias]

"""Answers of the workspace and project routes."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class Workspace(Answer):
    """Determined's v1Workspace."""

    id: int
    name: str
    archived: bool
    username: str
    userId: int
    immutable: bool
    numProjects: int
    numExperiments: int
    pinned: bool
    state: str
    errorMessage: str
    agentUserGroup: dict[str, Any] | None
    checkpointStorageConfig: dict[str, Any] | None
    defaultComputePool: str
    defaultAuxPool: str
    maxSlots: int | None = None  # Epochal's: the most slots the workspace's work holds at once


class Project(Answer):
    """Determined's v1Project."""

    id: int
    name: str
    key: str
    description: str
    workspaceId: int
    workspaceName: str
    archived: bool
    immutable: bool
    username: str
    userId: int
    notes: list[dict[str, Any]]
    numExperiments: int
    numActiveExperiments: int
    numRuns: int
    lastExperimentStartedAt: str | None
    state: str
    errorMessage: str


class WorkspaceList(Answer):
    """Determined's v1GetWorkspacesResponse."""

    workspaces: list[Workspace]
    pagination: Pagination


class WorkspaceAnswer(Answer):
    """Determined's v1GetWorkspaceResponse and v1PatchWorkspaceResponse."""

    workspace: Workspace


class WorkspaceCreated(Answer):
    """Determined's v1PostWorkspaceResponse."""

    workspace: Workspace
    namespaceBindings: dict[str, Any]


class ProjectList(Answer):
    """Determined's v1GetWorkspaceProjectsResponse."""

    projects: list[Project]
    pagination: Pagination


class ProjectAnswer(Answer):
    """Determined's v1GetProjectResponse, v1PostProjectResponse and v1PatchProjectResponse."""

    project: Project


class Deleted(Answer):
    """Determined's v1DeleteWorkspaceResponse and v1DeleteProjectResponse."""

    completed: bool


class WorkspaceMembers(Answer):
    """Determined's v1GetGroupsAndUsersAssignedToWorkspaceResponse."""

    assignments: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    usersAssignedDirectly: list[dict[str, Any]]


class WorkspacePools(Answer):
    """Determined's v1ListRPsBoundToWorkspaceResponse: the pools a workspace may use."""

    resourcePools: list[str]
    pagination: Pagination

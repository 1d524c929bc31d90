"""Answers of the resource pools' binding routes."""

from __future__ import annotations

from api.schemas import Answer, Pagination


class PoolBindings(Answer):
    """Determined's v1ListWorkspacesBoundToRPResponse: the workspaces bound to a pool."""

    workspaceIds: list[int]
    pagination: Pagination

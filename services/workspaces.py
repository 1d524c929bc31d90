"""Where a new experiment goes: the request's project, else the one its config names."""

from __future__ import annotations

from typing import Any

import asyncpg

from services.errors import Invalid

# Workspace 1 and project 1 ("Uncategorized") always exist (migration 0007).
DEFAULT_PROJECT_ID = 1


async def resolve_project(
    conn: asyncpg.Pool | asyncpg.Connection, project_id: int | None, config: dict[str, Any],
    field: str = "projectId",
) -> int:
    """Where a new experiment goes: the request's projectId, else the config's `workspace` and
    `project` names, else the default project. An unknown one is the request's mistake."""
    if project_id:
        if await conn.fetchval("SELECT id FROM projects WHERE id = $1", project_id) is None:
            raise Invalid(f"project {project_id} not found",
                          [f"{field}: no project has id {project_id}"])
        return project_id
    workspace, project = config.get("workspace"), config.get("project")
    if not workspace and not project:
        return DEFAULT_PROJECT_ID
    if not workspace or not project:
        given, missing = ("workspace", "project") if workspace else ("project", "workspace")
        raise Invalid("the config names a project only by workspace and project together",
                      [f"{missing}: needed with {given} {workspace or project!r}"])
    # The named workspace's id and its named project's (None when it has none).
    row = await conn.fetchrow(
        "SELECT w.id AS workspace_id, p.id AS project_id FROM workspaces w"
        " LEFT JOIN projects p ON p.workspace_id = w.id AND p.name = $2 WHERE w.name = $1",
        str(workspace), str(project))
    if row is None:
        raise Invalid(f"workspace {workspace!r} not found",
                      [f"workspace: no workspace is named {workspace!r}"])
    if row["project_id"] is None:
        raise Invalid(f"project {project!r} not found in workspace {workspace!r}",
                      [f"project: workspace {workspace!r} has no project named {project!r}"])
    return int(row["project_id"])

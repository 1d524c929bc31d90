"""Users, workspaces, projects, templates, models and model versions of a source, as rows here.

Each function takes one parsed item inside the request's transaction and answers its Result:
an object imported before answers its local id again (created false); one whose name the
target already uses maps to that row, with a warning, where the two are the same kind of
thing (a user, a workspace, a project, a model), and is skipped where they may differ (a
template of another config)."""

from __future__ import annotations

import asyncpg

from services.errors import Invalid
from services.history_import import models as m
from services.history_import.mapping import (
    Result,
    local_int,
    mapped_container,
    owner_or_admin,
    remember,
)


async def import_user(conn: asyncpg.Connection, source_id: int, user: m.User,
                      where: str) -> Result:
    """Without a password: the user cannot log in until they set one or an admin resets it."""
    result = Result(str(user.id))
    found = await local_int(conn, source_id, "user", user.id)
    if found is not None:
        result.local_id = str(found)
        return result
    new_id = await conn.fetchval(
        "INSERT INTO users (username, display_name, password_hash, admin, active, modified_at)"
        " VALUES ($1, $2, NULL, $3, $4, coalesce($5::timestamptz, now()))"
        " ON CONFLICT (username) DO NOTHING RETURNING id",
        user.username, user.displayName or None, user.admin, user.active, user.modifiedAt)
    if new_id is None:
        new_id = await conn.fetchval("SELECT id FROM users WHERE username = $1", user.username)
        result.warnings.append(f"user {user.username!r} already exists here: the source's "
                               "user maps to it (its password and flags are unchanged)")
    else:
        result.created = True
    await remember(conn, source_id, "user", user.id, new_id)
    result.local_id = str(new_id)
    return result


async def import_workspace(conn: asyncpg.Connection, source_id: int, workspace: m.Workspace,
                           where: str) -> Result:
    result = Result(str(workspace.id))
    if workspace.id == 1:
        result.local_id = "1"
        return result
    found = await local_int(conn, source_id, "workspace", workspace.id)
    if found is None:
        found = await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace.name)
        if found is not None:
            result.warnings.append(f"workspace {workspace.name!r} already exists here: the "
                                   "source's workspace maps to it")
        else:
            owner = await owner_or_admin(conn, workspace.username, "the workspace",
                                         result.warnings)
            pools = [p for p in (workspace.defaultComputePool, workspace.defaultAuxPool) if p]
            if pools:
                result.warnings.append(f"the workspace's default pools ({', '.join(pools)}) "
                                       "are not kept: set them here if this cluster has them")
            found = await conn.fetchval(
                "INSERT INTO workspaces (name, owner, archived) VALUES ($1, $2, $3)"
                " RETURNING id", workspace.name, owner, workspace.archived)
            result.created = True
        await remember(conn, source_id, "workspace", workspace.id, found)
    result.local_id = str(found)
    return result


async def _free_key(conn: asyncpg.Connection, key: str | None, name: str) -> str:
    """The project's key, or one made from it (or its name) that no project has yet."""
    stem = "".join(ch for ch in (key or name).upper() if ch.isalnum())[:50] or "PRJ"
    candidate, n = stem, 1
    while await conn.fetchval("SELECT EXISTS (SELECT 1 FROM projects WHERE key = $1)",
                              candidate):
        n += 1
        candidate = f"{stem}{n}"
    return candidate


async def import_project(conn: asyncpg.Connection, source_id: int, project: m.Project,
                         where: str) -> Result:
    result = Result(str(project.id))
    if project.id == 1:
        result.local_id = "1"
        return result
    found = await local_int(conn, source_id, "project", project.id)
    if found is None:
        workspace_id = await mapped_container(conn, source_id, "workspace",
                                              project.workspaceId, f"{where}.workspaceId")
        found = await conn.fetchval(
            "SELECT id FROM projects WHERE workspace_id = $1 AND name = $2",
            workspace_id, project.name)
        if found is not None:
            result.warnings.append(f"project {project.name!r} already exists in its workspace "
                                   "here: the source's project maps to it")
        else:
            owner = await owner_or_admin(conn, project.username, "the project",
                                         result.warnings)
            key = await _free_key(conn, project.key, project.name)
            if project.key and key != project.key:
                result.warnings.append(f"project key {project.key!r} is taken here: the "
                                       f"project's key is {key!r}")
            found = await conn.fetchval(
                "INSERT INTO projects (workspace_id, name, key, description, owner, archived,"
                " notes) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                workspace_id, project.name, key, project.description or "", owner,
                project.archived, [note.model_dump() for note in project.notes])
            result.created = True
        await remember(conn, source_id, "project", project.id, found)
    result.local_id = str(found)
    return result


async def import_template(conn: asyncpg.Connection, source_id: int, template: m.Template,
                          where: str) -> Result:
    """Keyed by name: a name the target has for another config is skipped, not replaced."""
    result = Result(template.name)
    workspace_id = await mapped_container(conn, source_id, "workspace", template.workspaceId,
                                          f"{where}.workspaceId")
    existing = await conn.fetchval("SELECT config FROM templates WHERE name = $1",
                                   template.name)
    if existing is None:
        await conn.execute("INSERT INTO templates (name, workspace_id, config) VALUES"
                           " ($1, $2, $3)", template.name, workspace_id, template.config)
        result.created = True
    elif existing != template.config:
        result.skipped = (f"template {template.name!r} exists here with another config: "
                          "rename or delete one to import the other")
        return result
    await remember(conn, source_id, "template", template.name, template.name)
    result.local_id = template.name
    return result


async def import_model(conn: asyncpg.Connection, source_id: int, model: m.Model,
                       where: str) -> Result:
    result = Result(str(model.id))
    found = await local_int(conn, source_id, "model", model.id)
    if found is None:
        workspace_id = await mapped_container(conn, source_id, "workspace", model.workspaceId,
                                              f"{where}.workspaceId")
        found = await conn.fetchval("SELECT id FROM models WHERE name = $1", model.name)
        if found is not None:
            result.warnings.append(f"model {model.name!r} already exists here: the source's "
                                   "model maps to it")
        else:
            owner = await owner_or_admin(conn, model.username, "the model", result.warnings)
            found = await conn.fetchval(
                "INSERT INTO models (name, description, notes, metadata, labels, owner,"
                " workspace_id, archived, created_at, updated_at) VALUES ($1, $2, $3, $4, $5,"
                " $6, $7, $8, coalesce($9::timestamptz, now()),"
                " coalesce($10::timestamptz, $9::timestamptz, now())) RETURNING id",
                model.name, model.description or "", model.notes or "", model.metadata,
                sorted(set(model.labels)), owner, workspace_id, model.archived,
                model.creationTime, model.lastUpdatedTime)
            result.created = True
        await remember(conn, source_id, "model", model.id, found)
    result.local_id = str(found)
    return result


async def import_model_version(conn: asyncpg.Connection, source_id: int,
                               version: m.ModelVersion, where: str) -> Result:
    """Its model and checkpoint must have been imported (else a 400 naming them); the version
    number is kept (a model that maps to one here holding that number skips it)."""
    result = Result(str(version.id))
    found = await local_int(conn, source_id, "model-version", version.id)
    if found is None:
        model_id = await local_int(conn, source_id, "model", version.model.id)
        if model_id is None:
            raise Invalid(f"the source's model {version.model.id} was not imported", [
                f"{where}.model.id: model {version.model.id} of the source was not imported"])
        uuid = str(version.checkpoint.uuid)
        if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM checkpoints WHERE uuid = $1)",
                                   version.checkpoint.uuid):
            raise Invalid(f"checkpoint {uuid} was not imported", [
                f"{where}.checkpoint.uuid: checkpoint {uuid} is not here: import its "
                "experiment's checkpoints first"])
        owner = await owner_or_admin(conn, version.username, "the version", result.warnings)
        found = await conn.fetchval(
            "INSERT INTO model_versions (model_id, version, checkpoint_uuid, name, comment,"
            " notes, metadata, labels, owner, created_at, updated_at) VALUES ($1, $2, $3, $4,"
            " $5, $6, $7, $8, $9, coalesce($10::timestamptz, now()),"
            " coalesce($11::timestamptz, $10::timestamptz, now()))"
            " ON CONFLICT (model_id, version) DO NOTHING RETURNING id",
            model_id, version.version, version.checkpoint.uuid, version.name or "",
            version.comment or "", version.notes or "", version.metadata,
            sorted(set(version.labels)), owner, version.creationTime, version.lastUpdatedTime)
        if found is None:
            result.skipped = (f"model {version.model.id} of the source maps to a model here "
                              f"that already has a version {version.version}")
            result.warnings = []
            return result
        result.created = True
        await remember(conn, source_id, "model-version", version.id, found)
    result.local_id = str(found)
    return result

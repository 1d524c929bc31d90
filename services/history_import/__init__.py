"""Importing a Determined cluster's history (issue 39; the contract: docs/CONTRACTS.md,
"Importing a Determined cluster's history"): `epochal import determined` reads a source cluster
and sends its objects as Determined answered them; this package turns them into Epochal's rows,
idempotently, keyed by (source, kind, Determined id) in `import_objects` (mapping.py).

    models.py       the fields read of Determined's objects, bounded
    mapping.py      sources, the mapping, the objects listing, `done` marks
    catalog.py      users, workspaces, projects, templates, models, model versions
    experiments.py  experiments (finished, no workflow), trials, checkpoints
    reports.py      metrics and logs, in bulk

One POST of a kind is one transaction: a refused item (a 400 naming it) writes nothing of the
request, and sending it again after the fix writes each item once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from pydantic import BaseModel

from services.errors import Invalid
from services.history_import import catalog, experiments
from services.history_import import models as m
from services.history_import.mapping import (
    DONE_KINDS,
    KIND_OF,
    MAX_OBJECTS_PAGE,
    Result,
    list_objects,
    mark_done,
    register_source,
    require_source,
    stored_kind,
)
from services.history_import.reports import import_logs, import_metrics
from services.settings import StorageSettings

__all__ = ["DONE_KINDS", "IMPORT_KINDS", "KIND_OF", "MAX_OBJECTS_PAGE", "Result",
           "import_items", "import_logs", "import_metrics", "list_objects", "mark_done",
           "register_source", "stored_kind"]

Importer = Callable[[asyncpg.Connection, int, Any, str], Awaitable[Result]]

# POST /imports/{source}/{kind}: each kind's item model and its import.
IMPORT_KINDS: dict[str, tuple[type[BaseModel], Importer | None]] = {
    "users": (m.User, catalog.import_user),
    "workspaces": (m.Workspace, catalog.import_workspace),
    "projects": (m.Project, catalog.import_project),
    "templates": (m.Template, catalog.import_template),
    "experiments": (m.ExperimentItem, None),  # needs the settings: below
    "trials": (m.Trial, experiments.import_trial),
    "checkpoints": (m.Checkpoint, experiments.import_checkpoint),
    "models": (m.Model, catalog.import_model),
    "model-versions": (m.ModelVersion, catalog.import_model_version),
}


async def import_items(pool: asyncpg.Pool, settings: StorageSettings, source_id: int,
                       kind: str, raw_items: list[Any]) -> list[Result]:
    """Import a page of one kind's objects, in one transaction; their results in order."""
    if kind not in IMPORT_KINDS:
        raise Invalid("unknown kind of imported object",
                      [f"kind: {kind[:50]!r} is none of {', '.join(IMPORT_KINDS)}"])
    model, importer = IMPORT_KINDS[kind]
    items = [m.parse(model, raw, f"items[{i}]") for i, raw in enumerate(raw_items)]
    results = []
    storages: dict[str, list[str]] = {}  # each storage checked once per page
    async with pool.acquire() as conn, conn.transaction():
        await require_source(conn, source_id)
        for i, item in enumerate(items):
            where = f"items[{i}]"
            if importer is None:
                assert isinstance(item, m.ExperimentItem)
                results.append(await experiments.import_experiment(
                    conn, source_id, item, where, settings, storages))
            else:
                results.append(await importer(conn, source_id, item, where))
    return results

"""Answers of the history import routes (api/routes/imports.py)."""

from __future__ import annotations

from api.schemas import Answer


class ImportSource(Answer):
    """The source cluster's id here, and whether this call registered it."""

    sourceId: int
    created: bool


class ImportedObject(Answer):
    externalId: str
    localId: str
    done: bool
    sourceState: str | None


class ImportedObjects(Answer):
    """What the target holds from the source of one kind, by external id."""

    objects: list[ImportedObject]
    total: int


class ImportResult(Answer):
    """What became of one item: its local id, or why nothing was written (`skipped`)."""

    externalId: str
    localId: str | None
    created: bool
    skipped: str | None
    warnings: list[str]


class ImportResults(Answer):
    results: list[ImportResult]


class Written(Answer):
    """How many metric reports or log lines were written (those already here are not)."""

    written: int
    warnings: list[str] = []


class Marked(Answer):
    marked: int

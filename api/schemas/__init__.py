"""The answers' models: what every JSON route answers, field by field.

A route declares its model with `**answers(Model)`: FastAPI validates each answer against it
before sending it, so the OpenAPI schema is the code, and a field the code stops sending (or sends
with another type) fails the request instead of drifting from the schema. Models live in a module
per resource beside this one; shared pieces (the base, pagination) here. Fields a model does not
list still go out (`extra="allow"`): Determined's clients read fields Epochal only passes on, and an
answer leaves out a field its dict did not set (`response_model_exclude_unset`), as before.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    """The base of every answer model."""

    model_config = ConfigDict(extra="allow")


class ModelFile(BaseModel):
    """A file a request sends (Determined's v1File, its content base64): an experiment's model
    definition, a task's --context and --include."""

    path: str
    type: int = 48
    content: str = ""
    mode: int = 0o644
    mtime: int = 0
    uid: int = 0
    gid: int = 0


class Pagination(Answer):
    offset: int
    limit: int
    total: int


def answers(model: Any) -> dict[str, Any]:
    """A route's keywords for an answer of `model` (a model class or a typing form of one)."""
    return {"response_model": model, "response_model_exclude_unset": True}


class Empty(Answer):
    """An answer with nothing to say beyond success (Determined's empty responses: `{}`)."""

"""Answers of the config template routes."""

from __future__ import annotations

from typing import Any

from api.schemas import Answer, Pagination


class Template(Answer):
    """Determined's v1Template."""

    name: str
    config: dict[str, Any]
    workspaceId: int


class TemplateAnswer(Answer):
    """Determined's v1GetTemplateResponse (and those of PostTemplate, PutTemplate and
    PatchTemplateConfig)."""

    template: Template


class TemplateList(Answer):
    """Determined's v1GetTemplatesResponse."""

    templates: list[Template]
    pagination: Pagination

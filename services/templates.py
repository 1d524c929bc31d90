"""Config templates as a submission uses them: a template's config by name, merged UNDER the
config it is named with (what the config says wins), as Determined does. The templates' own
routes (api/routes/templates.py) keep, list and change them."""

from __future__ import annotations

from typing import Any

import asyncpg

from services.errors import Invalid


def merge_under(config: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The config with the template's values filled in where the config has none.

    Mappings merge key by key, recursively; any other value in the config (a list, a scalar)
    replaces the template's. Exceptions, as in Determined: each hyperparameter and the searcher
    (if the two name different searchers) are taken whole, never mixed from both; `bind_mounts`
    keep the config's and add the template's for other container paths.
    """
    merged = dict(template)
    for key, value in config.items():
        below = template.get(key)
        if key == "hyperparameters" and isinstance(value, dict) and isinstance(below, dict):
            merged[key] = {**below, **value}
        elif key == "searcher" and isinstance(value, dict) and isinstance(below, dict) and (
                below.get("name") not in (None, value.get("name", below.get("name")))):
            merged[key] = value
        elif key == "bind_mounts" and isinstance(value, list) and isinstance(below, list):
            used = {m.get("container_path") for m in value if isinstance(m, dict)}
            merged[key] = value + [m for m in below if not (
                isinstance(m, dict) and m.get("container_path") in used)]
        elif isinstance(value, dict) and isinstance(below, dict):
            merged[key] = merge_under(value, below)
        else:
            merged[key] = value
    return merged


async def template_config(conn: asyncpg.Pool | asyncpg.Connection, name: str) -> dict[str, Any]:
    """A template's config for a submission; unknown names are the request's mistake."""
    config = await conn.fetchval("SELECT config FROM templates WHERE name = $1", name)
    if config is None:  # the message says what was wrong, the detail which field and why
        raise Invalid("invalid request: unknown config template",
                      [f"template: no config template is named {name!r} (`epochal template "
                       "list` names them)"])
    return dict(config)

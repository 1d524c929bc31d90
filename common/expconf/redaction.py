"""A config's secrets, and the config as people see it: the one home for what is hidden.

A config's secrets are its checkpoint storage's S3 `secret_key` and the values of environment
variables whose names say they hold a credential (`WANDB_API_KEY`, `HF_TOKEN`, `DB_PASSWORD`,
...). Every view of a config (the API's `config` and `originalConfig` of experiments and trials,
templates, and so the dashboard, `epochal` and `det experiment config`) shows it through
`redacted` or `redacted_text`; only runs get the values, from the stored config.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

REDACTED = "********"
# Names of environment variables that hold credentials: hidden in every view of a config.
CREDENTIAL_NAME = re.compile(
    r"(?i)(secret|token|passw|credential|private|api_?key|access_?key|auth|_key$|^key$)")
# A value this short could be any part of the text: the text is written anew instead.
_SHORTEST_REPLACED = 4


def is_credential_name(name: str) -> bool:
    return bool(CREDENTIAL_NAME.search(name))


def _env_entries(variables: Any) -> Iterator[tuple[str, str]]:
    """(name, value) of `environment_variables` in each of Determined's forms: a mapping, a
    list of `NAME=value`, or those per device type (`{cpu: [...], cuda: [...]}`)."""
    if isinstance(variables, Mapping):
        if set(variables) <= {"cpu", "cuda", "rocm"} and all(
                isinstance(v, list | Mapping) for v in variables.values()):
            for per_device in variables.values():
                yield from _env_entries(per_device)
            return
        for name, value in variables.items():
            yield str(name), str(value)
    elif isinstance(variables, list):
        for entry in variables:
            if isinstance(entry, str) and "=" in entry:
                name, _, value = entry.partition("=")
                yield name, value


def secret_values(config: Any) -> set[str]:
    """The values `redacted` hides."""
    if not isinstance(config, Mapping):
        return set()
    found: set[str] = set()
    storage = config.get("checkpoint_storage")
    if isinstance(storage, Mapping) and storage.get("secret_key"):
        found.add(str(storage["secret_key"]))
    environment = config.get("environment")
    if isinstance(environment, Mapping):
        found.update(value for name, value in _env_entries(environment.get("environment_variables"))
                     if value and is_credential_name(name))
    return found


def _redact_env(variables: Any) -> Any:
    if isinstance(variables, Mapping):
        return {name: (REDACTED if value and not isinstance(value, list | Mapping)
                       and is_credential_name(str(name)) else _redact_env(value))
                for name, value in variables.items()}
    if isinstance(variables, list):
        out = []
        for entry in variables:
            name, equals, value = entry.partition("=") if isinstance(entry, str) else ("", "", "")
            out.append(f"{name}={REDACTED}" if equals and value and is_credential_name(name)
                       else entry)
        return out
    return variables


def redacted(config: Any) -> Any:
    """The config with its secrets replaced by REDACTED (the stored config is unchanged)."""
    if not isinstance(config, Mapping):
        return config
    shown = dict(config)
    storage = shown.get("checkpoint_storage")
    if isinstance(storage, Mapping) and storage.get("secret_key"):
        shown["checkpoint_storage"] = {**storage, "secret_key": REDACTED}
    environment = shown.get("environment")
    if isinstance(environment, Mapping) and environment.get("environment_variables"):
        shown["environment"] = {**environment, "environment_variables": _redact_env(
            environment["environment_variables"])}
    return shown


def redacted_text(text: str | None) -> str | None:
    """A config's YAML (or JSON) text as submitted, with its secrets' values hidden and the rest
    as written; text that is no config mapping is hidden whole if it names a secret key."""
    if not text:
        return text
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return REDACTED if "secret" in text.lower() else text
    secrets = secret_values(config)
    if not secrets:
        return text
    if min(len(s) for s in secrets) < _SHORTEST_REPLACED:
        return yaml.safe_dump(redacted(config), sort_keys=False)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text

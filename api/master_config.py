"""The master's effective config as `det master config` shows it (admins only), every secret
hidden: the cluster token, the admin's first password, the database URL's password, the S3
keys, Temporal's API key and client key, and any password written into a URL.

The settings are shown in Determined's master.yaml shape where it has one; a setting this
module does not know yet is shown as it is under its own name, unless its name says it holds a
credential (common/expconf/redaction.py's rule), and any URL in it without its password.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from api.settings import Settings
from common.expconf.redaction import REDACTED, is_credential_name

# Settings never shown, only whether they are set.
SECRET_SETTINGS = frozenset({"cluster_token", "admin_password"})
# Settings shown in Determined's shape (some in part: the database URL without its password,
# Temporal's TLS without its key and API key, the storage without its keys).
SHAPED_SETTINGS = frozenset({
    "db_url", "temporal_address", "temporal_namespace", "temporal_security", "api_host",
    "api_port", "cluster_id", "cluster_name", "checkpoint_dir", "max_model_definition_bytes",
    "resource_pools", "session_ttl", "storage_roots", "checkpoint_storage", "create_bucket",
    "temporal_ui_url", "dashboard_url",
})
_STORAGE_SECRETS = ("access_key", "secret_key", "session_token")


def redact_url(url: str | None) -> str | None:
    """`url` with the password of its user part hidden (`postgresql://u:********@h/db`)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL that can be read apart: show none of it
        return REDACTED
    if password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{REDACTED}@{host}"))


def _db(url: str) -> dict[str, Any]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return {"url": REDACTED}
    return {"url": redact_url(url), "host": parts.hostname or "", "port": port,
            "name": parts.path.lstrip("/"), "user": parts.username or "",
            "password": REDACTED if parts.password else ""}


def _storage(settings: Settings) -> dict[str, Any]:
    if not settings.checkpoint_storage:
        return settings.default_storage()
    shown: dict[str, Any] = {}
    for key, value in settings.checkpoint_storage.items():
        if key in _STORAGE_SECRETS:
            shown[key] = REDACTED if value else value
        else:
            shown[key] = redact_url(value) if isinstance(value, str) else value
    return shown


def _plain(name: str, value: Any) -> Any:
    """A setting this module does not shape, as YAML shows it, credentials hidden."""
    if is_credential_name(name):
        return REDACTED if value else value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, tuple | list):
        return [_plain("", v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(str(k), v) for k, v in value.items()}
    if isinstance(value, str):
        return redact_url(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return REDACTED  # an object this module cannot tell is harmless


def printable(settings: Settings, *, token_default_days: int,
              token_max_days: int) -> dict[str, Any]:
    """The config in Determined's master.yaml shape where it has one, secrets hidden."""
    security = settings.temporal_security
    known = SHAPED_SETTINGS | SECRET_SETTINGS
    others = {f.name: _plain(f.name, getattr(settings, f.name)) for f in fields(settings)
              if f.name not in known}
    return {**others,
        "cluster_id": settings.cluster_id,
        "cluster_name": settings.cluster_name,
        "port": settings.api_port,
        "listen_host": settings.api_host,
        "db": _db(settings.db_url),
        "temporal": {
            "address": settings.temporal_address,
            "namespace": settings.temporal_namespace,
            "tls": security.tls or security.cert is not None or security.ca is not None,
            "server_name": security.server_name,
            "client_certificate": security.cert is not None,
            "client_key": REDACTED if security.key is not None else None,
            "api_key": REDACTED if security.api_key else None,
            "ui_url": redact_url(settings.temporal_ui_url),
        },
        "checkpoint_storage": _storage(settings),
        "checkpoint_dir": settings.checkpoint_dir,
        "storage_roots": list(settings.storage_roots),
        "create_bucket": settings.create_bucket,
        "resource_pools": [{"pool_name": name} for name in settings.resource_pools],
        "max_model_definition_bytes": settings.max_model_definition_bytes,
        "dashboard_url": redact_url(settings.dashboard_url),
        "security": {
            "cluster_token": REDACTED,
            "initial_user_password": REDACTED if settings.admin_password else "",
            "session_ttl_hours": settings.session_ttl.total_seconds() / 3600,
            "token": {"default_lifespan_days": token_default_days,
                      "max_lifespan_days": token_max_days},
        },
        "log": {"level": logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower(),
                "color": False},
    }

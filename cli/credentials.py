"""Where the CLI keeps its login: one token per master, in ~/.epochal/auth.json (mode 0600).

`EPOCHAL_TOKEN` overrides the file (scripts, CI); `EPOCHAL_AUTH_FILE` moves it (tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TOKEN_ENV = "EPOCHAL_TOKEN"
AUTH_FILE_ENV = "EPOCHAL_AUTH_FILE"


def auth_file() -> Path:
    custom = os.environ.get(AUTH_FILE_ENV)
    return Path(custom) if custom else Path.home() / ".epochal" / "auth.json"


def _read() -> dict[str, Any]:
    try:
        data = json.loads(auth_file().read_text())
    except (OSError, ValueError):
        return {"masters": {}}
    if not isinstance(data, dict) or not isinstance(data.get("masters"), dict):
        return {"masters": {}}
    return data


def _write(data: dict[str, Any]) -> None:
    path = auth_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def token_for(master_url: str) -> str | None:
    env = os.environ.get(TOKEN_ENV)
    if env:
        return env
    entry = _read()["masters"].get(master_url) or {}
    token = entry.get("token")
    return token if isinstance(token, str) and token else None


def username_for(master_url: str) -> str | None:
    entry = _read()["masters"].get(master_url) or {}
    name = entry.get("username")
    return name if isinstance(name, str) else None


def remember(master_url: str, username: str, token: str) -> None:
    data = _read()
    data["masters"][master_url] = {"username": username, "token": token}
    _write(data)


def forget(master_url: str) -> bool:
    data = _read()
    if data["masters"].pop(master_url, None) is None:
        return False
    _write(data)
    return True

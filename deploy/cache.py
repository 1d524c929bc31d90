"""Where `make test` keeps what it builds once per machine (Determined's venv, a lock for
apt-get): `EPOCHAL_CACHE_DIR`, else `epochal` under the user's cache directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("EPOCHAL_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "epochal"

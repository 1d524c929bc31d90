"""Installing Debian packages the tests need (Docker, Chromium), where we may: in CI or as root.

`make test` runs on a fresh machine with no stdin, so apt-get never prompts; elsewhere the
callers only say what to install. `make test` sets up Docker and Chromium side by side, so our
apt-gets take turns.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from common.flags import TRUE_WORDS
from deploy.cache import cache_root


def in_ci() -> bool:
    """CI systems set CI=true; any other value (some set a name) is not a yes."""
    return os.environ.get("CI", "").strip().lower() in TRUE_WORDS


def may_set_up() -> bool:
    """Whether we may install packages and start services here: in CI, or as root."""
    return in_ci() or os.geteuid() == 0


# How long an install waits for dpkg's lock while another program (unattended-upgrades, another
# user's apt-get) holds it.
DPKG_LOCK_WAIT_SECONDS = 300


def _apt_turn() -> Path:
    """The lock file our apt-gets take turns through (apt's own lock on the package lists
    fails a second `apt-get update` at once instead of waiting)."""
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    return cache / "apt-get.lock"


def apt_install(packages: list[str], say: Callable[[str], None]) -> None:
    """apt-get update and install `packages` (as root, or through passwordless sudo), after
    any other apt_install of ours has finished."""
    with _apt_turn().open("a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        _apt_get(packages, say)


def _apt_get(packages: list[str], say: Callable[[str], None]) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    say(f"installing {', '.join(packages)} with apt-get")
    subprocess.run([*sudo, "apt-get", "-q", "update"], check=True, env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    subprocess.run([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y",
                    "-o", f"DPkg::Lock::Timeout={DPKG_LOCK_WAIT_SECONDS}", "install",
                    "--no-install-recommends", *packages],
                   check=True, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

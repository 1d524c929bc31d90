"""Installing Debian packages the tests need (Docker, Chromium), where we may: in CI or as root.

`make test` runs on a fresh machine with no stdin, so apt-get never prompts; elsewhere the
callers only say what to install.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from common.flags import TRUE_WORDS


def in_ci() -> bool:
    """CI systems set CI=true; any other value (some set a name) is not a yes."""
    return os.environ.get("CI", "").strip().lower() in TRUE_WORDS


def may_set_up() -> bool:
    """Whether we may install packages and start services here: in CI, or as root."""
    return in_ci() or os.geteuid() == 0


def apt_install(packages: list[str], say: Callable[[str], None]) -> None:
    """apt-get update and install `packages` (as root, or through passwordless sudo)."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    say(f"installing {', '.join(packages)} with apt-get")
    subprocess.run([*sudo, "apt-get", "-q", "update"], check=True, env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    subprocess.run([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y",
                    "install", "--no-install-recommends", *packages], check=True, env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

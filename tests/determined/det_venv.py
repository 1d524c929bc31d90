"""Session fixture `det_venv`: Determined 0.38.1's client in its own virtualenv, `.venv-det/`.

Determined's pins (an older urllib3, protobuf ...) must not shape Epochal's own environment, so
its `det` CLI and Core API live apart and tests run them as subprocesses from this bin directory.
The venv is made once and reused; a lock keeps two pytest sessions from building it together,
and a marker written only after a complete install tells a finished venv from an interrupted one.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DETERMINED_VERSION = "0.38.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_DIR = REPO_ROOT / ".venv-det"
_MARKER = "epochal-determined-version"


def ensure_det_venv(venv: Path = VENV_DIR, version: str = DETERMINED_VERSION) -> Path:
    """The bin directory of a venv holding exactly `determined==version`, built if needed."""
    bin_dir = venv / "bin"
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version(venv) == version:
            return bin_dir
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-input",
              f"determined=={version}"])
        (venv / _MARKER).write_text(version)
    return bin_dir


def _installed_version(venv: Path) -> str | None:
    marker = venv / _MARKER
    if not marker.is_file() or not (venv / "bin" / "det").exists():
        return None
    return marker.read_text().strip()


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


@pytest.fixture(scope="session")
def det_venv() -> Path:
    """bin directory of `.venv-det/` (its `python` imports determined, its `det` is the CLI)."""
    return ensure_det_venv()

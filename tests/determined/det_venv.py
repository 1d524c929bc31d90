"""Session fixture `det_venv`: Determined 0.38.1's client in its own virtualenv, `.venv-det/`.

Determined's pins (an older urllib3, protobuf ...) must not shape Epochal's own environment, so
its `det` CLI and Core API live apart and tests run them as subprocesses from this bin directory.
The same venv is the task environment of the tests that run Determined users' training code
(`--task-env`), so it also holds torch (CPU): torch lands there and never in Epochal's .venv.
The venv is made once and reused; a lock keeps two pytest sessions from building it together,
and markers written only after a complete install tell a finished venv from an interrupted one
(the task packages have their own, so an older venv gets them added, not rebuilt).
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
# What Determined users' training code needs besides `determined` (PyTorchTrial writes
# TensorBoard files). `torch==2.13.0` exactly: a CPU build of it lies on this kind of machine's
# disk; any other torch downloads a CUDA build.
TASK_PACKAGES = ("torch==2.13.0", "tensorboard==2.21.0")
_TASK_MARKER = "epochal-task-packages"


def ensure_det_venv(venv: Path = VENV_DIR, version: str = DETERMINED_VERSION) -> Path:
    """The bin directory of a venv holding exactly `determined==version`, built if needed."""
    bin_dir = venv / "bin"
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version(venv) != version:
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)])
            _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-input",
                  f"determined=={version}"])
            (venv / _MARKER).write_text(version)
        task_marker = venv / _TASK_MARKER
        wanted = " ".join(TASK_PACKAGES)
        if not task_marker.is_file() or task_marker.read_text().strip() != wanted:
            _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-input",
                  *TASK_PACKAGES])
            task_marker.write_text(wanted)
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

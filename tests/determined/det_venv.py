"""Session fixture `det_venv`: Determined 0.38.1's client in a virtualenv of its own.

Determined's pins (an older urllib3, protobuf ...) must not shape Epochal's own environment, so
its `det` CLI and Core API live apart and tests run them as subprocesses from this bin directory.
The same venv is the task environment of the tests that run Determined users' training code
(`--task-env`), so it also holds torch (CPU): torch lands there and never in Epochal's .venv.

It is built once per machine and cached by content: its directory's name holds a hash of what
goes in (Determined's version, the task packages, the interpreter), under `~/.cache/epochal/`
(`EPOCHAL_CACHE_DIR`), so a fresh clone finds it ready and a change of content builds a new one.
`make test` builds it before the suite (`python -m tests.determined.det_venv`); a lock keeps two
builds apart, and a marker written only after a complete install tells a finished venv from an
interrupted one.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.cache import cache_root
from tests.cli_zygote import zygote

DETERMINED_VERSION = "0.38.1"
# What Determined users' training code needs besides `determined` (PyTorchTrial writes
# TensorBoard files). `torch==2.13.0` exactly: a CPU build of it lies on this kind of machine's
# disk; any other torch downloads a CUDA build.
TASK_PACKAGES = ("torch==2.13.0", "tensorboard==2.21.0")
_MARKER = "epochal-venv-complete"


def _content_key() -> str:
    content = "\n".join([DETERMINED_VERSION, *TASK_PACKAGES, sys.version,
                          str(Path(sys.base_prefix).resolve())])
    return hashlib.sha256(content.encode()).hexdigest()[:12]


VENV_DIR = cache_root() / f"determined-{DETERMINED_VERSION}-{_content_key()}"


def ensure_det_venv(venv: Path = VENV_DIR) -> Path:
    """The bin directory of `venv`, holding `determined` and the task packages, built if
    missing or left half-built."""
    bin_dir = venv / "bin"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / _MARKER).is_file():
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)])
            for packages in ([f"determined=={DETERMINED_VERSION}"], TASK_PACKAGES):
                _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-input",
                      *packages])
            (venv / _MARKER).write_text(_content_key())
    return bin_dir


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


@pytest.fixture(scope="session")
def det_venv() -> Path:
    """bin directory of the venv (its `python` imports determined, its `det` is the CLI)."""
    return ensure_det_venv()


@pytest.fixture(scope="session")
def det_cli(det_venv: Path) -> Iterator[Path]:
    """The `det` command the tests run: Determined's CLI from `det_venv`, imported once per
    session and forked per call (tests/cli_zygote.py), as the venv's `det` script runs it.
    Its own package, `determined.cli`, is imported anew in each call: it reads DET_MASTER and
    the clock at import (the SDK below it, most of the import time, is imported once)."""
    with tempfile.TemporaryDirectory(prefix="det-cli-") as directory, zygote(
            det_venv / "python", "det", "determined.cli.cli:main(argv)", Path(directory),
            fresh=("determined.cli",)) as det:
        yield det


if __name__ == "__main__":
    print(ensure_det_venv().parent)

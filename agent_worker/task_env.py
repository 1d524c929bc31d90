"""The task environment: the Python environment a trial's entrypoint runs in (process runtime).

Without one, a trial runs with the agent's own interpreter first on PATH, where Epochal's harness
is installed (Epochal's examples need nothing else). With `--task-env DIR` (or
`EPOCHAL_TASK_ENV`), DIR is a virtualenv or conda prefix: DIR/bin comes first on PATH and
VIRTUAL_ENV or CONDA_PREFIX is set as activating it would, so `python3`, and the `python3` of
every launcher the entrypoint starts, is the user's, with their `determined`, torch and data
libraries.

Epochal is not installed there. The agent keeps two directories under its work dir:
`harness-path/` holds only the `harness` package (a symlink to the agent's) and goes on the
trial's PYTHONPATH, so nothing else of Epochal's environment can shadow the user's packages;
`harness-fallback/` holds what the harness needs (httpx and what httpx requires, symlinked from
the agent's environment), and the harness appends it to the END of sys.path only when the task
environment has no httpx of its own (harness/__init__.py reads `HARNESS_FALLBACK_ENV`).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import HARNESS_FALLBACK_ENV

TASK_ENV_VAR = "EPOCHAL_TASK_ENV"
# The distributions the harness imports from outside the standard library.
HARNESS_REQUIRES = ("httpx",)
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")
# The agent's interpreter settings a task environment's python3 must not inherit.
AGENT_PYTHON_VARS = ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME")


class TaskEnvError(ValueError):
    """The task environment cannot be used; the message names the option and the path."""


@dataclass(frozen=True)
class TaskEnvironment:
    prefix: Path
    python: Path  # prefix/bin/python3, as the entrypoint's `python3` resolves
    conda: bool

    @classmethod
    def open(cls, directory: Path, option: str = "--task-env") -> TaskEnvironment:
        """Check that `directory` is a Python environment whose python3 runs."""
        prefix = directory.expanduser().absolute()
        python = prefix / "bin" / "python3"
        if not prefix.is_dir():
            raise TaskEnvError(f"{option} {prefix}: no such directory (expected a virtualenv "
                               "or conda prefix)")
        if not python.exists():
            raise TaskEnvError(f"{option} {prefix}: {python} does not exist (expected a "
                               "virtualenv or conda prefix with bin/python3)")
        try:
            # As a trial would run it: without the agent's own interpreter settings.
            env = {k: v for k, v in os.environ.items() if k not in AGENT_PYTHON_VARS}
            done = subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=60, env=env)
        except (OSError, subprocess.SubprocessError) as err:
            raise TaskEnvError(f"{option} {prefix}: cannot run {python}: {err}") from err
        if done.returncode != 0:
            raise TaskEnvError(f"{option} {prefix}: {python} exited with code "
                               f"{done.returncode}: {done.stderr.strip()[-300:]}")
        return cls(prefix=prefix, python=python, conda=(prefix / "conda-meta").is_dir())

    def describe(self) -> str:
        return f"the task environment {self.prefix} (python3 = {self.python})"

    def activation(self) -> dict[str, str]:
        """The variables activating the environment sets (PATH is the runtime's to build)."""
        return {"CONDA_PREFIX" if self.conda else "VIRTUAL_ENV": str(self.prefix)}


@dataclass(frozen=True)
class HarnessPath:
    """The directories that make the harness importable in a task environment."""

    path: Path  # on PYTHONPATH: only the harness package
    fallback: Path  # appended to sys.path by the harness when the environment lacks httpx

    @classmethod
    def prepare(cls, work_dir: Path) -> HarnessPath:
        """(Re)build both directories under `work_dir` from the agent's own environment."""
        made = cls(path=work_dir / "harness-path", fallback=work_dir / "harness-fallback")
        for directory in (made.path, made.fallback):
            if directory.is_symlink() or directory.is_file():
                directory.unlink()
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        (made.path / "harness").symlink_to(Path(harness.__file__).resolve().parent)
        for name, source in sorted(importables(distributions_required(HARNESS_REQUIRES))):
            (made.fallback / name).symlink_to(source)
        return made

    def environment(self) -> dict[str, str]:
        return {HARNESS_FALLBACK_ENV: str(self.fallback)}


def distributions_required(roots: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """`roots` and what they require, as installed here (extras and absent ones left out)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("-", "_").replace(".", "_")
        if key in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement for another Python version or platform
        found[key] = dist
        for requirement in dist.requires or []:
            match = _REQUIREMENT_NAME.match(requirement)
            if match and not _EXTRA_MARKER.search(requirement):
                todo.append(match.group(0))
    return list(found.values())


def importables(dists: list[importlib.metadata.Distribution]) -> set[tuple[str, Path]]:
    """(top-level name, path) of the packages and modules `dists` installed."""
    out: set[tuple[str, Path]] = set()
    for dist in dists:
        for file in dist.files or []:
            top = file.parts[0]
            if (top in ("..", "__pycache__") or top.endswith((".dist-info", ".egg-info", ".pth"))
                    or len(file.parts) == 1 and not top.endswith(".py")):
                continue
            out.add((top, Path(str(dist.locate_file(top)))))
    return out


def task_env_from_environ() -> Path | None:
    raw = os.environ.get(TASK_ENV_VAR, "").strip()
    return Path(raw) if raw else None

"""The CLI's start stays light: `epochal --help` and a command's `--help` load none of the modules
only some commands need (issue 37 item 18: the start under 0.3 s). Checked on sys.modules in a
fresh interpreter, so a top-level import that drags one back in fails here, whatever the timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Loaded only by the commands that use them: the HTTP client (httpx, and its own command line's
# click and pygments), YAML, tar, the config model, and the master's parts.
HEAVY = ["httpx", "httpcore", "click", "yaml", "tarfile", "common.expconf", "pathspec",
         "temporalio", "asyncpg", "fastapi", "deploy.local_cluster", "deploy.master"]

PROBE = """
import contextlib, io, json, runpy, sys
exits = json.loads(sys.argv[2])
sys.argv = ["epochal", *json.loads(sys.argv[1])]
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        runpy.run_module(sys.argv.pop(1), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in exits, exc.code
assert "Usage" in out.getvalue() or exits == [1], out.getvalue()
print(json.dumps(sorted(sys.modules)))
"""


def loaded(module: str, *words: str, exits: tuple[int | None, ...] = (0, None)) -> set[str]:
    """The modules loaded by `python -m MODULE WORDS...` (which must print its usage, or exit
    with one of `exits`)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([module, *words]), json.dumps(exits)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
             "EPOCHAL_MASTER": "http://127.0.0.1:9", "EPOCHAL_TOKEN": "t"})
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("words", [
    ("deploy.console", "--help"),
    ("cli.main", "experiment", "list", "--help"),
    ("deploy.console", "experiment", "create", "--help"),
    ("deploy.console", "checkpoint", "--help"),
], ids=" ".join)
def test_the_help_loads_no_heavy_module(words: tuple[str, ...]) -> None:
    modules = loaded(*words)
    assert "typer" in modules  # the probe ran the CLI
    assert not [m for m in HEAVY if m in modules], sorted(m for m in HEAVY if m in modules)


def test_a_command_loads_httpx_without_its_command_line() -> None:
    # httpx imports its own CLI (click, pygments, rich.syntax) when click is installed.
    modules = loaded("deploy.console", "experiment", "list", exits=(1,))  # no master there
    assert "httpx" in modules
    assert not {"click", "pygments", "rich.syntax", "yaml"} & modules

"""Issue 37 item 14: every command line README.md's Usage block shows exists and takes the
arguments and flags shown; every command takes `--json`, and an action's `--json` prints JSON
instead of its line."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import cli.client
from deploy.console import app
from tests.fakes.cli_master import FakeMaster, experiment

README = Path(__file__).resolve().parents[2] / "README.md"

# Commands that run a server in this process until it is stopped: they answer nothing to print
# as JSON (their logs go to stderr); README.md names them where it says which commands take --json.
SERVERS = {("agent", "run"), ("master", "run")}


def root() -> Any:
    return typer.main.get_command(app)


def leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from leaves(sub, (*path, name))
    else:
        yield path, command


def resolve(words: list[str], start: tuple[str, ...] = ()) -> tuple[tuple[str, ...], Any, int]:
    """(the command path, its click command, how many words named it) from `start`'s group."""
    command = root()
    for name in start:
        command = command.commands[name]
    path, used = start, 0
    while hasattr(command, "commands") and used < len(words) and words[used] in command.commands:
        command = command.commands[words[used]]
        path, used = (*path, words[used]), used + 1
    return path, command, used


def test_every_command_takes_json() -> None:
    lacking = [" ".join(path) for path, command in leaves(root())
               if path not in SERVERS
               and "--json" not in {o for p in command.params for o in getattr(p, "opts", [])}]
    assert lacking == []
    assert len(list(leaves(root()))) > 70  # the walk saw every group


def usage_lines() -> list[tuple[list[str], str]]:
    """Each `epochal ...` command of the Usage block (split at `;`) and the comment after it."""
    block = README.read_text().split("## Usage", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    found = []
    for line in block.splitlines():
        code, comment = split_comment(line)
        for part in code.split(" ; "):
            words = shlex.split(part.strip())
            if words[:1] == ["epochal"]:
                found.append((words[1:], comment.strip()))
    return found


def split_comment(line: str) -> tuple[str, str]:
    """(the shell code, the comment after its first unquoted ` #`)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1:].strip()
    return line, ""


def test_the_usage_block_is_read() -> None:
    commands = [" ".join(words[:2]) for words, _ in usage_lines()]
    assert len(commands) >= 25
    assert {"experiment create", "trial describe", "checkpoint download", "cluster down"} <= set(
        commands)
    assert ["run", "nvidia-smi || echo hi"] in [words[1:] for words, _ in usage_lines()]


@pytest.mark.parametrize(("words", "comment"), usage_lines(),
                         ids=[" ".join(w) for w, _ in usage_lines()])
def test_each_usage_line_parses(words: list[str], comment: str) -> None:
    path, command, used = resolve(words)
    assert not hasattr(command, "commands"), f"{' '.join(words)}: no such command"
    args = words[used:]
    for extra in ([], ["--json"]):  # as shown, and with --json
        ctx = command.make_context(" ".join(path), [*args, *extra], resilient_parsing=False)
        ctx.close()
    for also in re.findall(r"also: ([^#]*)", comment):
        check_also(path[:-1], also)


def check_also(group: tuple[str, ...], text: str) -> None:
    """`also: describe ID, logs ID [-f]`: each named command exists (next to the line's, or from
    the top), and each flag named is one of its options."""
    text = re.sub(r"\([^)]*\)", "", text)
    for item in re.split(r"[,;/]", text):
        words = item.replace("[", " ").replace("]", " ").split()
        if not words:
            continue
        for start in (group, group[:-1], ()):
            path, command, used = resolve(words, start)
            if used and not hasattr(command, "commands"):
                break
        else:
            pytest.fail(f"README mentions {item.strip()!r}: no such command")
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        for flag in (w for w in words[used:] if w.startswith("-")):
            assert flag in options, f"{' '.join(path)} takes no {flag}"


# -- what --json prints ------------------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    return master


def run(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100", "EPOCHAL_MASTER": None})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_actions_print_json(fake: FakeMaster) -> None:
    fake.on("POST", "/experiments/4/pause", {})
    fake.on("GET", "/me", {"user": {"id": 1, "username": "ada", "admin": False}})
    fake.on("PATCH", "/experiments/4", {"experiment": experiment(name="renamed")})
    fake.on("GET", "/experiments/4", {"experiment": experiment(), "config": {"x": 1}})
    fake.on("POST", "/workspaces", {"workspace": {"id": 2, "name": "vision"}})

    assert run("experiment", "pause", "4", "--json") == {"id": 4, "action": "pause"}
    assert run("user", "whoami", "--json") == {
        "user": {"id": 1, "username": "ada", "admin": False}}
    assert run("experiment", "set", "name", "4", "renamed", "--json")["experiment"][
        "name"] == "renamed"
    assert run("experiment", "label", "add", "4", "b", "--json")["labels"] == ["demo"]
    assert run("experiment", "config", "4", "--normalized", "--json") == {"config": {"x": 1}}
    assert run("workspace", "create", "vision", "--json") == {
        "workspace": {"id": 2, "name": "vision"}}


def test_experiment_continue_posts_the_override(fake: FakeMaster, tmp_path: Path) -> None:
    fake.on("POST", "/experiments/continue", {"experiment": experiment("STATE_ACTIVE")})
    override = tmp_path / "longer.yaml"
    override.write_text("searcher:\n  max_length: 2000\n")

    result = CliRunner().invoke(app, ["experiment", "continue", "4", "-c", str(override)],
                                env={"EPOCHAL_MASTER": None})

    assert result.exit_code == 0, result.output
    assert result.stdout == "Continued experiment 4\n"
    assert fake.body("POST", "/experiments/continue") == {
        "id": 4, "overrideConfig": "searcher:\n  max_length: 2000\n"}
    assert run("experiment", "continue", "4", "--json")["experiment"]["state"] == "STATE_ACTIVE"
    assert fake.body("POST", "/experiments/continue") == {"id": 4, "overrideConfig": None}

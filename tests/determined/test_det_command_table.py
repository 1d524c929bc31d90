"""docs/DETERMINED_USERS.md's `det` table against Determined 0.38.1's own command tree.

The table is what a Determined user reads before pointing `det` at Epochal, so it must cover the
client they have: a command of the real client without a status (a newer client, a forgotten row)
fails, and so does an entry naming no command of the client (a typo), a command with two statuses
and a count in the section's first sentence that the rows no longer add up to.

A row is `| `group` | commands | status |`: commands are comma-separated paths under the group,
the last word of one may list alternatives (`set name/description`), and `—` stands for the group
itself when it is a command of its own (`version`).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.determined.det_command_tree import command_tree

DOC = Path(__file__).parents[2] / "docs" / "DETERMINED_USERS.md"
SECTION = "## The `det` CLI"
# Status kinds, by how a status starts, as the section's counts name them.
KINDS = {"works": "work", "501: ": "answer 501", "not applicable: ": "not applicable"}
_ROW = re.compile(r"^\|\s*`(?P<group>[\w-]+)`\s*\|(?P<commands>[^|]*)\|(?P<status>.*)\|\s*$")
_COUNTS = re.compile(r"has\s+(\d+)\s+commands:\s+(\d+)\s+work,\s+(\d+)\s+answer\s+501[^,]*,"
                     r"\s+and\s+(\d+)\s+are\s+not\s+applicable")


def section_text(markdown: str) -> str:
    start = markdown.index(SECTION)
    end = markdown.find("\n## ", start + len(SECTION))
    return markdown[start:] if end == -1 else markdown[start:end]


def table_rows(section: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(command path, status) for every command each row names, and the table lines that are
    not rows (neither the header nor its rule), so a malformed row fails instead of vanishing."""
    entries: list[tuple[str, str]] = []
    malformed: list[str] = []
    table = [line for line in section.splitlines() if line.startswith("|")]
    for line in table[2:]:
        row = _ROW.match(line)
        if row is None:
            malformed.append(line)
            continue
        status = row["status"].strip()
        for item in row["commands"].replace("`", "").split(","):
            words = item.split()
            if words in ([], ["—"]):
                entries.append((row["group"], status))
                continue
            *head, last = words
            for alternative in last.split("/"):
                entries.append((" ".join([row["group"], *head, alternative]), status))
    return entries, malformed


def kind_of(status: str) -> str | None:
    return next((kind for start, kind in KINDS.items() if status.startswith(start)), None)


@pytest.fixture(scope="module")
def tree(det_venv: Path) -> list[str]:
    return command_tree(det_venv)


@pytest.fixture(scope="module")
def section() -> str:
    return section_text(DOC.read_text())


def test_the_walk_finds_the_client_s_commands(tree: list[str]) -> None:
    # A broken walk (no subcommands found) would make every other check here vacuous.
    assert {"experiment create", "experiment set gc-policy", "master cluster-message set",
            "version", "template set-value config"} <= set(tree)
    assert "experiment help" not in tree and "e create" not in tree


def test_every_det_command_has_a_status(tree: list[str], section: str) -> None:
    named = {command for command, _ in table_rows(section)[0]}
    missing = [command for command in tree if command not in named]
    assert not missing, f"`det` commands without a status in {DOC.name}: {missing}"


def test_the_table_names_only_det_commands(tree: list[str], section: str) -> None:
    entries, malformed = table_rows(section)
    unknown = sorted({command for command, _ in entries} - set(tree))
    assert not unknown, f"{DOC.name} names commands Determined 0.38.1's `det` lacks: {unknown}"
    assert not malformed, f"table lines that are not `| `group` | ... | ... |` rows: {malformed}"


def test_each_command_has_one_status_of_a_known_kind(section: str) -> None:
    entries, _ = table_rows(section)
    twice = sorted(c for c, n in Counter(command for command, _ in entries).items() if n > 1)
    assert not twice, f"commands with more than one row: {twice}"
    unknown = sorted({status for _, status in entries if kind_of(status) is None})
    assert not unknown, f"statuses that start with none of {list(KINDS)}: {unknown}"


def test_the_section_s_counts_are_the_table_s(tree: list[str], section: str) -> None:
    kinds = Counter(kind_of(status) for _, status in table_rows(section)[0])
    expected = (f"has {len(tree)} commands: {kinds['work']} work, {kinds['answer 501']} "
                f"answer 501 ..., and {kinds['not applicable']} are not applicable")
    counts = _COUNTS.search(section)
    assert counts is not None, f"the section should say: {expected}"
    assert [int(n) for n in counts.groups()] == [
        len(tree), kinds["work"], kinds["answer 501"], kinds["not applicable"]], (
        f"the section's counts are stale; they are: {expected}")

"""What the CLI prints of other users' text: literally, never as terminal control or markup."""

from __future__ import annotations

import pytest

from cli import render


def test_names_are_printed_literally(capsys: pytest.CaptureFixture[str]) -> None:
    t = render.table("ID", "Name", shrink=["Name"])
    t.add_row("1", "\x1b[2J\x1b[31mowned\x07")
    t.add_row("2", "[red]not markup[/] [/]")
    render.show(t)
    render.show(render.fields([("Name", "tab\there\x9b")]))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\\x1b[2J\\x1b[31mowned\\x07" in out
    assert "[red]not markup[/] [/]" in out
    assert "tab\\x09here\\x9b" in out

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


def test_a_long_error_wraps_at_words_on_a_terminal_and_stays_one_line_into_a_pipe(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    message = ("error: cannot reach the master at http://127.0.0.1:8080: [Errno 111] Connection "
               "refused (is the cluster up? `epochal cluster up`)")
    monkeypatch.setenv("COLUMNS", "80")
    render.sentence(message, ["a detail line that is also rather long, " * 3])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 4 and all(len(line) <= 80 for line in lines), lines
    assert " ".join(" ".join(lines).split()) == " ".join(
        (message + " " + "a detail line that is also rather long, " * 3).split())
    assert lines[1].startswith("  ") and lines[2].startswith("  a detail")  # indents kept

    monkeypatch.delenv("COLUMNS")
    render.sentence(message)
    assert capsys.readouterr().err == message + "\n"

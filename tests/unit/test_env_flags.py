"""Yes/no settings read one way: the words each side takes, and a clear error otherwise."""

from __future__ import annotations

import pytest

from api.settings import Settings
from common.flags import FlagError, flag


@pytest.mark.parametrize("text", ["1", "true", "TRUE", " yes ", "On"])
def test_yes_words(text: str) -> None:
    assert flag("X", text) is True


@pytest.mark.parametrize("text", [None, "", "0", "false", "No", "off"])
def test_no_words(text: str | None) -> None:
    assert flag("X", text) is False


def test_anything_else_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHAL_CREATE_BUCKET", "y")
    with pytest.raises(FlagError, match=r"EPOCHAL_CREATE_BUCKET: expected true or false, got 'y'"):
        Settings.from_env()
    monkeypatch.setenv("EPOCHAL_CREATE_BUCKET", "on")
    assert Settings.from_env().create_bucket is True

"""Without Chromium the browser tests skip on a workstation but fail in CI (CI=true)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import require_chromium


def test_missing_chromium_fails_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI"):
        require_chromium(tmp_path / "no-chromium")


def test_missing_chromium_skips_outside_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium is missing"):
        require_chromium(tmp_path / "no-chromium")


def test_present_chromium_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    browser = tmp_path / "chromium"
    browser.touch()
    require_chromium(browser)

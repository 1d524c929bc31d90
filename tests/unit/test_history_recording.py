"""Recording histories for the replay tests (tests/replay/recording.py): under a tag, never over
a history already recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory

from tests.replay import recording


def test_a_history_is_saved_under_its_tag_once(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(recording, "HISTORIES", tmp_path)
    history = WorkflowHistory("experiment-1", list(History().events))
    monkeypatch.delenv(recording.RECORD_ENV, raising=False)
    recording.save("grid-experiment", history)
    assert list(tmp_path.iterdir()) == []  # not recording

    monkeypatch.setenv(recording.RECORD_ENV, "before-issue34")
    recording.save("grid-experiment", history)
    assert [p.name for p in tmp_path.iterdir()] == ["grid-experiment-before-issue34.json"]
    with pytest.raises(FileExistsError, match="never re-recorded"):
        recording.save("grid-experiment", history)

    for bad in ("1", "Before Issue 34"):  # the old switch, "1", names no code
        monkeypatch.setenv(recording.RECORD_ENV, bad)
        with pytest.raises(ValueError, match="EPOCHAL_RECORD_HISTORIES"):
            recording.save("pool", history)

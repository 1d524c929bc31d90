"""Saving workflow histories for the replay tests (tests/replay/test_replay.py).

`EPOCHAL_RECORD_HISTORIES=<tag>` makes the tests that record save their runs' histories as
`histories/<name>-<tag>.json`. The tag says which code recorded them (`before-issue34`: the
workflows as they were before that issue changed them), and an existing file is never
overwritten: a history recorded before a change is what proves the change replays.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowHistory

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORD_ENV = "EPOCHAL_RECORD_HISTORIES"


def tag() -> str | None:
    """The tag histories are recorded under, or None when not recording."""
    value = os.environ.get(RECORD_ENV)
    if not value:
        return None
    if not re.fullmatch(r"[a-z][a-z0-9-]*", value):
        raise ValueError(f"{RECORD_ENV}: expected a tag naming the code that records, such as "
                         f"before-issue34 (a lowercase letter, then letters, digits and "
                         f"dashes), got {value!r}")
    return value


def save(name: str, history: WorkflowHistory) -> None:
    """Save `history` as `<name>-<tag>.json`, unless one is there already."""
    recording = tag()
    if recording is None:
        return
    path = HISTORIES / f"{name}-{recording}.json"
    if path.exists():
        raise FileExistsError(f"{path} is recorded already: histories are never re-recorded "
                              f"(give {RECORD_ENV} a new tag)")
    HISTORIES.mkdir(parents=True, exist_ok=True)
    path.write_text(history.to_json())


async def save_experiment(client: Client, handle: WorkflowHandle[Any, Any], name: str,
                          trial_workflow_id: str | None = None) -> None:
    """Save the experiment's history (`<name>-experiment`) and one trial's (`<name>-trial`):
    the one named, else the first Temporal lists."""
    if tag() is None:
        return
    save(f"{name}-experiment", await handle.fetch_history())
    if trial_workflow_id is None:
        async for execution in client.list_workflows(
            f"WorkflowType = 'TrialWorkflow' AND WorkflowId STARTS_WITH '{handle.id}-trial-'"
        ):
            trial_workflow_id = execution.id
            break
    if trial_workflow_id is not None:
        save(f"{name}-trial", await client.get_workflow_handle(trial_workflow_id).fetch_history())

"""Recorded workflow histories still replay: a change to workflow code that would break running
workflows (a reordered activity, a removed timer) fails here instead of in production.

Histories come from tests/workflows with EPOCHAL_RECORD_HISTORIES=<tag> (tests/replay/recording.py;
interactive tasks' from a local cluster: a command, a killed one, a notebook stopped by
idle_timeout). They are never re-recorded: a change to workflow code is guarded with
`workflow.patched` and replays the histories recorded before it; new ones get a new tag.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from workflows.experiment import ExperimentWorkflow
from workflows.provisioner import ProvisionerWorkflow
from workflows.resource_pool import ResourcePoolWorkflow
from workflows.task import TaskWorkflow
from workflows.trial import TrialWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_recorded() -> None:
    assert len(HISTORIES) >= 4, "run tests/workflows with EPOCHAL_RECORD_HISTORIES=<tag>"
    recorded = {p.stem for p in HISTORIES}
    # Recorded before trials without the searcher metric completed (they ended in ERROR).
    assert "no-searcher-metric-trial" in recorded
    # Recorded before issue 34 (trials as child workflows, Temporal's statuses): how each kind
    # of end, a findable experiment and a continue-as-new ran until then.
    assert {f"{name}-before-issue34" for name in (
        "grid-experiment", "grid-trial", "crashing-trial-experiment", "crashing-trial-trial",
        "findable-error-experiment", "findable-error-trial", "findable-canceled-experiment",
        "killed-experiment", "killed-trial", "canceled-experiment", "canceled-trial",
        "pause-activate-experiment", "asha-stopping-experiment", "asha-promotion-experiment",
        "random-continue-as-new-experiment")} <= recorded
    # Recorded by issue 34's code: trials as children (before and after a continue-as-new),
    # each kind of end in its Temporal status, cancel requests from Temporal's UI, a run
    # begun by the code before and ended by it, and tasks' ends.
    assert {f"{name}-issue34" for name in (
        "grid-trial", "findable-error-trial", "killed-experiment", "killed-trial",
        "cancel-request-experiment", "cancel-request-trial", "trial-cancel-request-trial",
        "children-continue-as-new-experiment", "upgraded-killed-experiment",
        "completed-task", "failed-task", "killed-task", "cancel-request-task")} <= recorded
    # Recorded by issue 36's code: each run carries its RunSpec (patch marker and all).
    assert {"run-spec-experiment-issue36", "run-spec-trial-issue36"} <= recorded
    # Recorded once the pool's head request kept its agents across passes
    # (STEADY_RESERVATION_PATCH): a backfill beside a head whose agents drain.
    assert "pool-backfill-steady-reservation" in recorded


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[ExperimentWorkflow, TrialWorkflow, ResourcePoolWorkflow,
                                   ProvisionerWorkflow, TaskWorkflow])
    await replayer.replay_workflow(history)

"""Issue 37 item 6: the job queue as services/pools.py makes it from a pool's `describe` answer:
a task's own slots and no trial counts, the scheduler's order (holding slots first, then by
priority and submission), and what each waiting job waits for."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from services.pools import _jobs_of, waits_for

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
NOTEBOOK = "3f2a9c1e-7b4d-4e2a-9c1e-7b4d4e2a9c00"


def agent(agent_id: str, slots: int, held: Sequence[int] = (), *, enabled: bool = True,
          alive: bool = True) -> dict[str, Any]:
    return {"id": agent_id, "slotIds": list(range(slots)), "enabled": enabled, "alive": alive,
            "allocations": [{"allocationId": "x", "slotIds": list(held)}] if held else []}


def entry(experiment: int, trial: int | str, slots: int = 1, priority: int = 42,
          **more: Any) -> dict[str, Any]:
    allocation = f"{experiment}.{trial}.1" if experiment else f"{trial}.1"
    return {"allocation_id": allocation, "experiment_id": experiment,
            "trial_id": trial if experiment else 0, "slots": slots, "priority": priority,
            "max_slots": None, "requested_at": "", **more}


def test_a_running_notebook_shows_its_own_slots_and_no_trials() -> None:
    view = {"agents": [agent("a", 2, [0])],
            "allocations": [entry(0, NOTEBOOK, 1)], "queue": []}

    (job,) = _jobs_of("default", view, {NOTEBOOK: "NOTEBOOK"}, {NOTEBOOK: T0})

    assert (job["jobId"], job["type"], job["entityId"]) == (NOTEBOOK, "TYPE_NOTEBOOK", NOTEBOOK)
    assert (job["allocatedSlots"], job["requestedSlots"]) == (1, 1)  # not "1 / 0"
    assert job["runningTrials"] is None and job["queuedTrials"] is None
    assert job["summary"] == {"state": "STATE_SCHEDULED", "jobsAhead": 0}
    assert job["submissionTime"] == T0.isoformat() and "waiting" not in job


def test_jobs_are_listed_by_priority_then_submission_holders_first() -> None:
    """Fair share put experiment 3 (holding nothing) ahead of experiment 2 in the pool's queue;
    the list still shows the earlier experiment first, and a running task by its own time."""
    view = {"agents": [agent("a", 2, [0, 1])],
            "allocations": [entry(2, 20), entry(0, NOTEBOOK, 1)],
            "queue": [entry(3, 30), entry(2, 21), entry(4, 40, priority=10)]}
    submitted = {"experiment-2": T0, NOTEBOOK: T0 + timedelta(minutes=1),
                 "experiment-3": T0 + timedelta(minutes=2),
                 "experiment-4": T0 + timedelta(minutes=3)}

    jobs = _jobs_of("default", view, {NOTEBOOK: "NOTEBOOK"}, submitted)

    assert [(j["jobId"], j["summary"]["state"], j["summary"]["jobsAhead"]) for j in jobs] == [
        ("experiment-2", "STATE_SCHEDULED", 0), (NOTEBOOK, "STATE_SCHEDULED", 1),
        ("experiment-4", "STATE_QUEUED", 2), ("experiment-3", "STATE_QUEUED", 3)]
    two = jobs[0]
    assert (two["allocatedSlots"], two["requestedSlots"]) == (1, 2)
    assert (two["runningTrials"], two["queuedTrials"]) == (1, 1)


def test_a_waiting_job_says_what_it_waits_for() -> None:
    view = {"agents": [agent("a", 2, [0]), agent("b", 4, [], enabled=False)],
            "allocations": [entry(1, 10)],
            "queue": [entry(2, 20, 2), entry(0, NOTEBOOK, 1), entry(3, 30, 1)]}

    assert waits_for("default", view) == [
        "2 slots; 1 free in pool default (1 agent lost or disabled)",
        "behind job experiment-2", "behind job experiment-2"]
    jobs = _jobs_of("default", view, {NOTEBOOK: "SHELL"}, {})
    shell = next(j for j in jobs if j["jobId"] == NOTEBOOK)
    assert shell["waiting"] == "behind job experiment-2"
    assert (shell["allocatedSlots"], shell["requestedSlots"], shell["queuedTrials"]) == (
        0, 1, None)


def test_what_fits_what_is_capped_and_what_waits_for_agents() -> None:
    view = {"agents": [agent("a", 2), agent("b", 2, [0])],
            "allocations": [entry(5, 50)],
            "queue": [entry(6, 60, 1), entry(5, 51, 1, max_slots=1),
                      entry(7, 70, 6, waiting="trial 70 needs 6 slots ..."), entry(8, 80, 4)]}

    assert waits_for("p", view) == [
        "the scheduler's next pass (1 slot free)",
        "1 slot; its experiment holds 1 of its max_slots (1)",
        "no agent has 6 slots, nor can pool p's agents (2 x 2 slots) make them up: it waits"
        " for agents to join",
        "4 slots; 2 free in pool p"]  # best fit left agent a idle, b full


def test_a_pool_without_agents() -> None:
    view = {"agents": [], "allocations": [], "queue": [entry(0, NOTEBOOK, 1)]}
    assert waits_for("gpu", view) == ["1 slot; no agent in pool gpu"]

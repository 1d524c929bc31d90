"""ExperimentWorkflow and TrialWorkflow on a real Temporal dev server and a real PostgreSQL.

The master's real activities write the database; the agent's `run_trial` is replaced by a
scripted stand-in registered under the real name on a fake agent's own task queue (the agent is
registered with the test's resource pool), so each test decides what the "training process"
does (succeed, crash, wait for preemption, hang until killed).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.worker import Worker

from activities.experiment_store import ExperimentStore
from activities.workflow_messages import MessageActivities
from agent_worker.liveness import Liveness
from common import search_attributes
from common.expconf import validate_experiment_config
from common.payload_codec import ENDING_FAILURES
from common.search_attributes import experiment_attributes, experiment_memo
from common.temporal_names import (
    MASTER_TASK_QUEUE,
    agent_task_queue,
    experiment_workflow_id,
    trial_workflow_id,
)
from tests.replay.recording import save_experiment
from tests.waiting import eventually, within
from tests.workflows.pool_helpers import register
from wire.pools import PoolInput
from wire.workflow_io import (
    ExperimentInput,
    RecordExperimentStateInput,
    RunTrialInput,
    RunTrialResult,
)
from workflows.experiment import ExperimentWorkflow

Script = Callable[[RunTrialInput, asyncpg.Pool], Awaitable[RunTrialResult]]


def make_config(pool_name: str, **searcher: Any) -> dict[str, Any]:
    raw = {
        "name": "wf-test",
        "entrypoint": "python3 train.py",
        "hyperparameters": {
            "lr": {"type": "categorical", "vals": [0.1, 0.2, 0.3, 0.4]},
        },
        "searcher": {
            "name": "grid",
            "metric": "loss",
            "smaller_is_better": True,
            "max_length": {"batches": 10},
            "max_concurrent_trials": 2,
            **searcher,
        },
        "resources": {"resource_pool": pool_name},
        "max_restarts": 1,
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/epochal-wf-test"},
        "reproducibility": {"experiment_seed": 7},
    }
    return validate_experiment_config(raw).model_dump(mode="json")


async def start_experiment(
    client: Client, pool: asyncpg.Pool, config: dict[str, Any],
    task_queue: str = MASTER_TASK_QUEUE, *, owner: str | None = None,
    max_history_events: int = 0, project_id: int = 1,
) -> tuple[int, WorkflowHandle[Any, str]]:
    """With `owner`, started as the API starts it: with Epochal's search attributes and memo."""
    experiment_id = await pool.fetchval(
        "INSERT INTO experiments (name, config, original_config, seed, project_id)"
        " VALUES ($1, $2, '', 7, $3) RETURNING id",
        config["name"],
        config,
        project_id,
    )
    handle = await client.start_workflow(
        "ExperimentWorkflow",
        ExperimentInput(experiment_id=experiment_id, config=config, seed=7,
                        max_history_events=max_history_events),
        id=experiment_workflow_id(experiment_id),
        task_queue=task_queue,
        result_type=str,
        search_attributes=experiment_attributes(experiment_id, owner, config)
        if owner else None,
        memo=experiment_memo(config) if owner else None,
    )
    return experiment_id, handle


class FakeAgent:
    """Stands in for an agent: runs `script` as the `run_trial` activity, counting concurrency."""

    def __init__(self, pool: asyncpg.Pool, script: Script) -> None:
        self.pool = pool
        self.script = script
        self.running = 0
        self.max_running = 0
        self.runs: list[RunTrialInput] = []

    @activity.defn(name="run_trial")
    async def run_trial(self, inp: RunTrialInput) -> RunTrialResult:
        self.runs.append(inp)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            return await self.script(inp, self.pool)
        finally:
            self.running -= 1


async def report_validation(pool: asyncpg.Pool, inp: RunTrialInput, steps: int) -> None:
    """As the API stores a validation: the row, then the trial's best validation."""
    await pool.execute(
        "INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
        " VALUES ($1, 'validation', $2, $3) ON CONFLICT DO NOTHING",
        inp.trial_id,
        steps,
        {"loss": float(inp.hparams["lr"])},
    )
    await pool.execute("SELECT refresh_best_validation(ARRAY[$1::int])", inp.trial_id)


async def succeed(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    await asyncio.sleep(0.2)
    await report_validation(pool, inp, 10)
    return RunTrialResult(exit_code=0, agent_id="fake")


async def wait_for_preemption(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    """Behaves like the harness: trains until the master asks it to stop, then exits cleanly."""
    for _ in range(600):
        activity.heartbeat()
        if await pool.fetchval("SELECT preempt_requested FROM trials WHERE id = $1", inp.trial_id):
            return RunTrialResult(exit_code=0, agent_id="fake")
        if inp.run_id > 1:  # resumed after activate: finish
            await report_validation(pool, inp, 10)
            return RunTrialResult(exit_code=0, agent_id="fake")
        await asyncio.sleep(0.1)
    return RunTrialResult(exit_code=1, agent_id="fake", message="never preempted")


async def hang(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.1)


async def trial_states(pool: asyncpg.Pool, experiment_id: int) -> list[str]:
    rows = await pool.fetch(
        "SELECT state FROM trials WHERE experiment_id = $1 ORDER BY request_id", experiment_id
    )
    return [r["state"] for r in rows]


async def ended(handle: WorkflowHandle[Any, Any], timeout: float) -> str:
    """The final state of an experiment, trial or task as its workflow ended, checked against
    the status Temporal shows: COMPLETED is its result (Completed); ERROR fails it with the
    reason as the message and no stack trace (Failed); CANCELED cancels it (Canceled)."""
    try:
        await within(handle.result(), timeout, f"workflow {handle.id} to end")
        state, status = "COMPLETED", WorkflowExecutionStatus.COMPLETED
    except WorkflowFailureError as err:
        if isinstance(err.cause, CancelledError):
            state, status = "CANCELED", WorkflowExecutionStatus.CANCELED
        else:
            assert isinstance(err.cause, ApplicationError), err.cause
            assert err.cause.type in ENDING_FAILURES, err.cause.type
            assert err.cause.failure is not None and err.cause.failure.stack_trace == ""
            state, status = "ERROR", WorkflowExecutionStatus.FAILED
    assert (await handle.describe()).status == status
    return state


async def run_with_agent(
    client: Client, pool: asyncpg.Pool, script: Script, **searcher: Any
) -> tuple[FakeAgent, str, WorkflowHandle[Any, str], int]:
    agent, pool_name = await start_agent(client, pool, script)
    experiment_id, handle = await start_experiment(client, pool,
                                                   make_config(pool_name, **searcher))
    return agent, pool_name, handle, experiment_id


async def start_agent(
    client: Client, pool: asyncpg.Pool, script: Script, *, slots: int = 8,
    pool_input: Callable[[str], PoolInput] | None = None,
) -> tuple[FakeAgent, str]:
    """A fake agent running `script`, registered with a new pool of `slots` slots (started
    with `pool_input(name)` when given)."""
    pool_name = f"test-{uuid.uuid4().hex[:8]}"
    agent = FakeAgent(pool, script)
    # The agent polls its own queue; the pool's scheduler places runs there (8 slots).
    agent_id = f"{pool_name}-fake"
    fake_agent_liveness = Liveness(agent_id, beat=0.5)
    worker = Worker(
        client,
        task_queue=agent_task_queue(agent_id),
        activities=[agent.run_trial, fake_agent_liveness.agent_liveness],
        # As the real agent does: heartbeats (which carry cancellation) reach the server quickly.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
    )
    worker_task = asyncio.create_task(worker.run())
    await register(client, pool_name, agent_id, slots,
                   pool_input=pool_input(pool_name) if pool_input else None)
    agent.worker_task = worker_task  # type: ignore[attr-defined]
    return agent, pool_name


async def stop_agent(agent: FakeAgent) -> None:
    agent.worker_task.cancel()  # type: ignore[attr-defined]
    with pytest.raises(asyncio.CancelledError):
        await agent.worker_task  # type: ignore[attr-defined]


async def test_grid_runs_every_trial_within_the_concurrency_limit(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, _, handle, experiment_id = await run_with_agent(temporal_client, pool, succeed)
    try:
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    await save_experiment(temporal_client, handle, "grid")
    assert await trial_states(pool, experiment_id) == ["COMPLETED"] * 4
    assert agent.max_running == 2
    assert sorted(r.hparams["lr"] for r in agent.runs) == [0.1, 0.2, 0.3, 0.4]
    row = await pool.fetchrow(
        "SELECT e.state, t.hparams FROM experiments e JOIN trials t ON t.id = e.best_trial_id"
        " WHERE e.id = $1",
        experiment_id,
    )
    assert row["state"] == "COMPLETED"
    assert row["hparams"] == {"lr": 0.1}


async def test_a_crashing_trial_errors_after_max_restarts_while_siblings_complete(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    async def crash_lr_03(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        if inp.hparams["lr"] == 0.3:
            return RunTrialResult(exit_code=1, agent_id="fake", message="boom")
        return await succeed(inp, pool)

    agent, _, handle, experiment_id = await run_with_agent(temporal_client, pool, crash_lr_03)
    try:
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    assert await trial_states(pool, experiment_id) == [
        "COMPLETED",
        "COMPLETED",
        "ERROR",
        "COMPLETED",
    ]
    crashed_runs = [r for r in agent.runs if r.hparams["lr"] == 0.3]
    assert [r.run_id for r in crashed_runs] == [1, 2]  # first run + max_restarts (1)
    restarts, crashed = await pool.fetchrow(
        "SELECT restarts, id FROM trials WHERE experiment_id = $1 AND state = 'ERROR'",
        experiment_id)
    assert restarts == 2
    await save_experiment(temporal_client, handle, "crashing-trial",
                          trial_workflow_id(experiment_id, crashed))


async def listed(client: Client, query: str, count: int) -> list[WorkflowExecution]:
    """The workflows Temporal's visibility finds for `query`, once it finds `count`."""
    for _ in range(100):
        found = [execution async for execution in client.list_workflows(query)]
        if len(found) == count:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{query!r} found {len(found)} workflows, not {count}")


async def test_temporal_finds_experiments_by_search_attributes_and_shows_errors_as_failed(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Temporal's UI tells the truth: an experiment whose trials all fail ends FAILED (not
    COMPLETED) with the reason, its state and owner are search attributes, its trials are
    found by its id, its owner and their states, and one that was canceled ends Canceled."""
    async def crash(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        return RunTrialResult(exit_code=1, agent_id="fake", message="boom")

    owner = f"user-{uuid.uuid4().hex[:8]}"
    agent, pool_name = await start_agent(temporal_client, pool, crash)
    try:
        failing, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name), owner=owner)
        with pytest.raises(WorkflowFailureError) as failure:
            await within(handle.result(), 60, "the failing experiment to end")
        assert isinstance(failure.value.cause, ApplicationError)
        assert failure.value.cause.type == "ExperimentError"
        assert "all 4 of its trials failed" in str(failure.value.cause)
        assert await ended(handle, 5) == "ERROR"
        await save_experiment(temporal_client, handle, "findable-error")
        canceled, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name), owner=owner)
        await handle.signal("cancel")
        assert await ended(handle, 60) == "CANCELED"
        await save_experiment(temporal_client, handle, "findable-canceled")
    finally:
        await stop_agent(agent)

    experiments = f"EpochalOwner = '{owner}' AND WorkflowType = 'ExperimentWorkflow'"
    [found] = await listed(temporal_client, f"{experiments} AND EpochalState = 'ERROR'", 1)
    assert (found.id, found.status) == (experiment_workflow_id(failing),
                                        WorkflowExecutionStatus.FAILED)
    assert found.typed_search_attributes.get(search_attributes.EXPERIMENT_ID) == failing
    assert found.typed_search_attributes.get(search_attributes.SEARCHER) == "grid"
    assert (await found.memo())["metric"] == "loss"
    [found] = await listed(temporal_client, f"{experiments} AND EpochalState = 'CANCELED'", 1)
    assert (found.id, found.status) == (experiment_workflow_id(canceled),
                                        WorkflowExecutionStatus.CANCELED)
    trials = await listed(temporal_client, f"EpochalExperimentId = {failing}"
                          " AND WorkflowType = 'TrialWorkflow'", 4)
    trial_ids = {t.typed_search_attributes.get(search_attributes.TRIAL_ID) for t in trials}
    assert trial_ids == set(await pool.fetchval(
        "SELECT array_agg(id) FROM trials WHERE experiment_id = $1", failing))
    failed = await listed(temporal_client, f"EpochalOwner = '{owner}' AND EpochalState = 'ERROR'"
                          " AND WorkflowType = 'TrialWorkflow'", 4)
    assert {t.status for t in failed} == {WorkflowExecutionStatus.FAILED}
    assert len(await listed(temporal_client, experiments, 2)) == 2


async def test_pause_preempts_trials_and_activate_resumes_them(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, _, handle, experiment_id = await run_with_agent(
        temporal_client, pool, wait_for_preemption, max_concurrent_trials=4
    )
    try:
        await eventually(lambda: _count(pool, experiment_id, "RUNNING", 4), 30,
                         "4 trials to run")
        await handle.signal("pause")
        await eventually(lambda: _count(pool, experiment_id, "PAUSED", 4), 30,
                         "4 trials to pause")
        state = await pool.fetchval("SELECT state FROM experiments WHERE id = $1", experiment_id)
        assert state == "PAUSED"
        await handle.signal("activate")
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    assert await trial_states(pool, experiment_id) == ["COMPLETED"] * 4
    assert sorted({r.run_id for r in agent.runs}) == [1, 2]
    await save_experiment(temporal_client, handle, "pause-activate")


async def test_kill_stops_running_trials_at_once(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, _, handle, experiment_id = await run_with_agent(temporal_client, pool, hang)
    try:
        await eventually(lambda: _count(pool, experiment_id, "RUNNING", 2), 30,
                         "2 trials to run")
        await handle.signal("kill")
        assert await ended(handle, 30) == "CANCELED"
        await save_experiment(temporal_client, handle, "killed")
    finally:
        await stop_agent(agent)
    # Two trials were running and were killed; the other two were never started.
    assert await trial_states(pool, experiment_id) == ["CANCELED", "CANCELED"]
    assert agent.running == 0


async def _count(pool: asyncpg.Pool, experiment_id: int, state: str, n: int) -> bool:
    return n == await pool.fetchval(
        "SELECT count(*) FROM trials WHERE experiment_id = $1 AND state = $2",
        experiment_id,
        state,
    )


async def test_cancel_checkpoints_running_trials_and_starts_no_more(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, _, handle, experiment_id = await run_with_agent(
        temporal_client, pool, wait_for_preemption
    )
    try:
        await eventually(lambda: _count(pool, experiment_id, "RUNNING", 2), 30,
                         "2 trials to run")
        await handle.signal("cancel")
        assert await ended(handle, 30) == "CANCELED"
        await save_experiment(temporal_client, handle, "canceled")
    finally:
        await stop_agent(agent)
    # The two running trials were asked to stop and exited cleanly; the others never started.
    assert await trial_states(pool, experiment_id) == ["CANCELED", "CANCELED"]
    assert [r.run_id for r in agent.runs] == [1, 1]
    state = await pool.fetchval("SELECT state FROM experiments WHERE id = $1", experiment_id)
    assert state == "CANCELED"


async def report_training_only(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    """As Determined's 0_start tutorial: training metrics, never a validation."""
    await pool.execute(
        "INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
        " VALUES ($1, 'training', 10, $2) ON CONFLICT DO NOTHING",
        inp.trial_id,
        {"x": 1.0},
    )
    return RunTrialResult(exit_code=0, agent_id="fake")


async def test_a_trial_that_never_reports_the_searcher_metric_completes_with_a_warning(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """As on Determined (its 0_start tutorial and batch inference report no validation).
    Without max_length (Determined 0.38) the run gets no length: the training code decides.

    tests/replay/histories/no-searcher-metric-*.json were recorded by this test (with
    max_length) before the change, when such a trial ended in ERROR; they replay the old
    branch of workflow.patched("trial-completes-without-searcher-metric"), so this test no
    longer records them."""
    agent, _, handle, experiment_id = await run_with_agent(
        temporal_client, pool, report_training_only, name="random", max_trials=1,
        max_length=None,
    )
    try:
        final = await ended(handle, 60)
    finally:
        await stop_agent(agent)
    assert final == "COMPLETED"
    assert await trial_states(pool, experiment_id) == ["COMPLETED"]
    [run] = agent.runs
    assert run.max_length is None and run.config["searcher"]["max_length"] is None
    row = await pool.fetchrow(
        "SELECT e.best_trial_id, t.id AS trial_id, t.search_status FROM experiments e"
        " JOIN trials t ON t.experiment_id = e.id WHERE e.id = $1",
        experiment_id,
    )
    assert row["best_trial_id"] is None
    logs = await pool.fetch(
        "SELECT level, log FROM task_logs WHERE trial_id = $1 AND stdtype = 'master'",
        row["trial_id"],
    )
    assert [(r["level"], r["log"]) for r in logs] == [
        (
            "WARNING",
            '[epochal] the training code never reported the searcher metric "loss" in a '
            "validation (it reported: no validation metrics at all)",
        )
    ]
    assert row["search_status"] == 'completed without reporting the searcher metric "loss"'


async def test_a_quick_pause_and_activate_are_stored_in_the_order_they_came(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Each message's state write waits for the one before: a slow write of PAUSED may not land
    after the ACTIVE that followed it (the experiment would show PAUSED while it runs)."""
    store = ExperimentStore(pool)
    stored: list[str] = []

    @activity.defn(name="record_experiment_state")
    async def slow_pause(inp: RecordExperimentStateInput) -> None:
        if inp.state == "PAUSED":
            await asyncio.sleep(1.0)
        await store.record_experiment_state(inp)
        stored.append(inp.state)

    queue = f"experiments-{uuid.uuid4().hex[:8]}"
    activities = [a for a in store.all() if a.__name__ != "record_experiment_state"]
    agent, pool_name = await start_agent(temporal_client, pool, hang)
    config = make_config(pool_name, max_concurrent_trials=1)

    async def both_stored() -> bool:
        return len(stored) == 2

    async with Worker(temporal_client, task_queue=queue, workflows=[ExperimentWorkflow],
                      activities=[*activities, *MessageActivities(temporal_client).all(),
                                  slow_pause]):
        experiment_id, handle = await start_experiment(temporal_client, pool, config,
                                                       task_queue=queue)
        try:
            await eventually(lambda: _count(pool, experiment_id, "RUNNING", 1), 30,
                             "the trial to run")
            await handle.signal("pause")
            await handle.signal("activate")
            await eventually(both_stored, 30, "both pauses to be stored")
            assert stored == ["PAUSED", "ACTIVE"]
            assert await pool.fetchval(
                "SELECT state FROM experiments WHERE id = $1", experiment_id) == "ACTIVE"
            await handle.signal("kill")
            assert await ended(handle, 60) == "CANCELED"
        finally:
            await stop_agent(agent)


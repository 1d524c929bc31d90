"""An experiment moved to another resource pool (issue 38, `det job update --resource-pool`),
with the real ExperimentWorkflow, TrialWorkflow, pools and database activities and a scripted
`run_trial` on one fake agent per pool: a trial waiting in the old pool asks the new one at
once; a trial running in the old pool keeps its slots until its run ends, and its next run asks
the new pool.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

from common.temporal_names import (
    ExperimentMessages,
    resource_pool_workflow_id,
    trial_workflow_id,
)
from tests.replay.recording import save_experiment
from tests.waiting import eventually
from tests.workflows.test_experiment_workflow import (
    ended,
    make_config,
    report_validation,
    start_agent,
    start_experiment,
    stop_agent,
)
from tests.workflows.test_trial_preemption import _config, _is, _logs
from wire.pools import PoolMove
from wire.workflow_io import ExperimentInput, RunTrialInput, RunTrialResult


async def _queued_experiments(client: Client, pool_name: str) -> list[int]:
    view = await client.get_workflow_handle(resource_pool_workflow_id(pool_name)).query(
        "describe")
    return [r["experiment_id"] for r in view["queue"]]


def _held_until(release: asyncio.Event) -> Any:
    """A run that trains until `release` is set, then reports and succeeds."""
    async def run(inp: RunTrialInput, db: asyncpg.Pool) -> RunTrialResult:
        await asyncio.wait_for(release.wait(), 60)
        await report_validation(db, inp, 10)
        return RunTrialResult(exit_code=0, agent_id="old")
    return run


async def _succeed(inp: RunTrialInput, db: asyncpg.Pool) -> RunTrialResult:
    await report_validation(db, inp, 10)
    return RunTrialResult(exit_code=0, agent_id="new")


async def test_a_waiting_trial_moves_to_the_new_pool_and_runs_there(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    release = asyncio.Event()
    old_agent, old_pool = await start_agent(temporal_client, pool, _held_until(release), slots=1)
    new_agent, new_pool = await start_agent(temporal_client, pool, _succeed, slots=1)
    try:
        holder_id, holder = await start_experiment(temporal_client, pool, _config(old_pool, 42))
        await eventually(lambda: _is(pool, holder_id, "RUNNING"), 30, "the holder to run")
        moved_id, moved = await start_experiment(temporal_client, pool, _config(old_pool, 42))

        async def waits_in_old() -> bool:
            return moved_id in await _queued_experiments(temporal_client, old_pool)

        await eventually(waits_in_old, 30, "the second experiment to wait in the old pool")
        await moved.signal(ExperimentMessages.MOVE_TO_POOL, PoolMove(new_pool))
        assert await ended(moved, 60) == "COMPLETED"
        assert moved_id not in await _queued_experiments(temporal_client, old_pool)
        release.set()
        assert await ended(holder, 60) == "COMPLETED"
    finally:
        release.set()
        await stop_agent(old_agent)
        await stop_agent(new_agent)
    assert [r.experiment_id for r in new_agent.runs] == [moved_id]
    assert [r.experiment_id for r in old_agent.runs] == [holder_id]
    logs = await _logs(pool, moved_id)
    assert f"moved from resource pool {old_pool!r} to {new_pool!r}" in logs
    await save_experiment(temporal_client, moved, "pool-move")


async def test_a_running_trial_keeps_its_slots_and_its_next_run_asks_the_new_pool(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    new_pool = ""

    async def fail_once_moved(inp: RunTrialInput, db: asyncpg.Pool) -> RunTrialResult:
        trial = temporal_client.get_workflow_handle(trial_workflow_id(inp.experiment_id,
                                                                      inp.trial_id))

        async def told() -> bool:
            return bool(new_pool) and (await trial.query("describe"))["resource_pool"] == new_pool

        await eventually(told, 60, "the running trial to be told of the move")
        return RunTrialResult(exit_code=1, agent_id="old", message="crashed after the move")

    old_agent, old_pool = await start_agent(temporal_client, pool, fail_once_moved, slots=1)
    new_agent, new_pool = await start_agent(temporal_client, pool, _succeed, slots=1)
    try:
        experiment_id, handle = await start_experiment(temporal_client, pool,
                                                       _config(old_pool, 42))
        await eventually(lambda: _is(pool, experiment_id, "RUNNING"), 30, "the trial to run")
        await handle.signal(ExperimentMessages.MOVE_TO_POOL, PoolMove(new_pool))
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(old_agent)
        await stop_agent(new_agent)
    runs: list[tuple[str, Any]] = [("old", r.run_id) for r in old_agent.runs]
    runs += [("new", r.run_id) for r in new_agent.runs]
    assert sorted(runs, key=lambda r: r[1]) == [("old", 1), ("new", 2)]
    assert "crashed after the move" in await _logs(pool, experiment_id)
    await save_experiment(temporal_client, handle, "pool-move-running")


async def test_trials_started_after_a_move_ask_the_new_pool_across_continue_as_new(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """A grid of four trials, two at a time, in a pool of one slot: once moved, the waiting
    trial and the two the experiment starts later (after continuing as new) run in the new
    pool; the first stays where its slot is."""
    release = asyncio.Event()
    old_agent, old_pool = await start_agent(temporal_client, pool, _held_until(release), slots=1)
    new_agent, new_pool = await start_agent(temporal_client, pool, _succeed, slots=1)
    try:
        experiment_id, handle = await start_experiment(
            temporal_client, pool, make_config(old_pool), max_history_events=40)

        async def one_waits() -> bool:
            return experiment_id in await _queued_experiments(temporal_client, old_pool)

        await eventually(one_waits, 30, "the second trial to wait in the old pool")
        await handle.signal(ExperimentMessages.MOVE_TO_POOL, PoolMove(new_pool))

        async def three_ran() -> bool:
            return len(new_agent.runs) == 3

        await eventually(three_ran, 60, "three trials to run in the new pool")
        release.set()
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        release.set()
        await stop_agent(old_agent)
        await stop_agent(new_agent)
    assert len(old_agent.runs) == 1
    last_run = await temporal_client.get_workflow_handle(handle.id).fetch_history()
    assert last_run.run_id != handle.result_run_id, "the experiment continued as new"
    started = last_run.events[0].workflow_execution_started_event_attributes
    [carried] = await temporal_client.data_converter.decode(started.input.payloads,
                                                            [ExperimentInput])
    assert carried.config["resources"]["resource_pool"] == new_pool

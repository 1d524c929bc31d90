"""A trial preempted by its pool for higher-priority work (issue 38), with the real
ExperimentWorkflow, TrialWorkflow, pool and database activities and a scripted `run_trial`:
the run is asked to checkpoint and stop, gives its slot back, queues again and resumes from
that checkpoint; one that ignores the request is killed after the pool's grace.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from common.expconf import validate_experiment_config
from common.temporal_names import trial_workflow_id
from tests.replay.recording import save_experiment
from tests.waiting import eventually
from tests.workflows.test_experiment_workflow import (
    FakeAgent,
    ended,
    make_config,
    report_validation,
    start_agent,
    start_experiment,
    stop_agent,
)
from wire.pools import PoolInput, PoolPolicy
from wire.workflow_io import RunTrialInput, RunTrialResult


def _config(pool_name: str, priority: int) -> dict[str, Any]:
    """One trial (a grid of one point) at `priority`."""
    config = make_config(pool_name)
    config["hyperparameters"] = {"lr": 0.1}
    config["resources"]["priority"] = priority
    return validate_experiment_config(config).model_dump(mode="json")


async def _checkpoint(pool: asyncpg.Pool, inp: RunTrialInput, steps: int) -> str:
    """As the API stores a checkpoint the harness reports."""
    checkpoint = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, steps_completed,"
        " storage_path) VALUES ($1, $2, 'task', $3, $4, '/tmp/x')",
        checkpoint, inp.trial_id, f"{inp.experiment_id}.{inp.trial_id}.{inp.run_id}", steps)
    return checkpoint


async def checkpoint_when_preempted(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    """Low priority: trains until asked to stop, then checkpoints at step 4 and exits 0; a
    resumed run checks it starts there and finishes."""
    if inp.run_id > 1:
        assert inp.steps_completed == 4 and inp.latest_checkpoint is not None
        await report_validation(pool, inp, 10)
        return RunTrialResult(exit_code=0, agent_id="fake")
    for _ in range(600):
        activity.heartbeat()
        if await pool.fetchval("SELECT preempt_requested FROM trials WHERE id = $1",
                               inp.trial_id):
            await _checkpoint(pool, inp, 4)
            return RunTrialResult(exit_code=0, agent_id="fake")
        await asyncio.sleep(0.1)
    return RunTrialResult(exit_code=1, agent_id="fake", message="never preempted")


async def ignore_preemption(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    """Low priority run 1 checkpoints at once and never stops; a resumed run finishes."""
    if inp.run_id > 1:
        await report_validation(pool, inp, 10)
        return RunTrialResult(exit_code=0, agent_id="fake")
    await _checkpoint(pool, inp, 4)
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.1)


def _urgent_or(script: Any) -> Any:
    """The priority-1 experiment's runs succeed at once; the others run `script`."""
    async def run(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        if inp.config["resources"]["priority"] == 1:
            await report_validation(pool, inp, 10)
            return RunTrialResult(exit_code=0, agent_id="fake")
        result: RunTrialResult = await script(inp, pool)
        return result
    return run


async def _state(pool: asyncpg.Pool, experiment_id: int) -> str | None:
    state: str | None = await pool.fetchval(
        "SELECT state FROM trials WHERE experiment_id = $1", experiment_id)
    return state


async def _logs(pool: asyncpg.Pool, experiment_id: int) -> str:
    rows = await pool.fetch(
        "SELECT l.log FROM task_logs l JOIN trials t ON t.id = l.trial_id"
        " WHERE t.experiment_id = $1 ORDER BY l.id", experiment_id)
    return "".join(r["log"] for r in rows)


async def _run_preemption(client: Client, pool: asyncpg.Pool, script: Any,
                          grace: float) -> tuple[FakeAgent, int, int, Any, Any]:
    agent, pool_name = await start_agent(
        client, pool, _urgent_or(script), slots=1,
        pool_input=lambda name: PoolInput(name=name, policy=PoolPolicy(
            preemption=True, preemption_timeout_seconds=grace)))
    low_id, low = await start_experiment(client, pool, _config(pool_name, 42))
    await eventually(lambda: _is(pool, low_id, "RUNNING"), 30, "the low-priority trial to run")
    high_id, high = await start_experiment(client, pool, _config(pool_name, 1))
    return agent, low_id, high_id, low, high


async def _is(pool: asyncpg.Pool, experiment_id: int, state: str) -> bool:
    return await _state(pool, experiment_id) == state


async def test_a_preempted_trial_checkpoints_gives_its_slot_and_resumes_from_it(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, low_id, high_id, low, high = await _run_preemption(
        temporal_client, pool, checkpoint_when_preempted, grace=60)
    try:
        assert await ended(high, 60) == "COMPLETED"
        assert await ended(low, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    low_runs = [r for r in agent.runs if r.experiment_id == low_id]
    assert [r.run_id for r in low_runs] == [1, 2]
    assert low_runs[1].steps_completed == 4
    # The urgent run started between the two runs of the preempted trial.
    order = [r.experiment_id for r in agent.runs]
    assert order == [low_id, high_id, low_id]
    restarts = await pool.fetchval("SELECT restarts FROM trials WHERE experiment_id = $1",
                                   low_id)
    assert restarts == 0  # a preemption is no failure
    logs = await _logs(pool, low_id)
    assert "[epochal] preempted: resource pool" in logs and "priority 1" in logs
    assert "gave its slots back; queued again, to resume from checkpoint" in logs
    trial_id = await pool.fetchval("SELECT id FROM trials WHERE experiment_id = $1", low_id)
    await save_experiment(temporal_client, low, "preempted",
                          trial_workflow_id(low_id, trial_id))


async def test_a_run_that_ignores_its_preemption_is_killed_after_the_pools_grace(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    agent, low_id, _, low, high = await _run_preemption(
        temporal_client, pool, ignore_preemption, grace=2)
    try:
        assert await ended(high, 60) == "COMPLETED"
        assert await ended(low, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    logs = await _logs(pool, low_id)
    assert "did not stop within 2 s of its preemption: killed" in logs
    assert [r.run_id for r in agent.runs if r.experiment_id == low_id] == [1, 2]


async def test_a_workspace_cap_read_from_the_database_holds_its_trials_back(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """The master's `request_slots` activity tells the pool whose request it is: a workspace
    capped at 1 slot runs one of its trials at a time while another workspace's run beside."""
    name = f"capped-{uuid.uuid4().hex[:8]}"
    workspace = await pool.fetchval(
        "INSERT INTO workspaces (name, max_slots) VALUES ($1, 1) RETURNING id", name)
    project = await pool.fetchval(
        "INSERT INTO projects (workspace_id, name, key) VALUES ($1, 'p', $2) RETURNING id",
        workspace, name[-8:].upper())
    agent, pool_name = await start_agent(temporal_client, pool, _urgent_or(ignore_preemption),
                                         slots=3)
    try:
        capped = []
        for _ in range(2):
            capped.append(await start_experiment(temporal_client, pool, _config(pool_name, 42),
                                                 project_id=project))
        free_id, free = await start_experiment(temporal_client, pool, _config(pool_name, 42))
        await eventually(lambda: _is(pool, free_id, "RUNNING"), 30, "the uncapped trial to run")

        async def one_capped_runs() -> bool:
            states = [await _state(pool, e) for e, _ in capped]
            return sorted(map(str, states)) == ["QUEUED", "RUNNING"]

        await eventually(one_capped_runs, 30, "one capped trial running, one queued")
        queue = (await temporal_client.get_workflow_handle(
            f"resource-pool-{pool_name}").query("describe"))["queue"]
        assert [(r["workspace_id"], r["workspace_max_slots"]) for r in queue] == [(workspace, 1)]
        assert queue[0]["user_id"] is not None  # the experiment's owner, by id
    finally:
        for _, handle in [*capped, (free_id, free)]:
            await handle.signal("kill")
        await stop_agent(agent)

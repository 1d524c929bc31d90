"""Temporal tells the truth (issue 34): each experiment's trials are its child workflows, before
and after a continue-as-new, and every experiment, trial and task workflow ends in the status
that matches what it ended as (Completed, Failed with the reason and no stack trace, Canceled),
with `EpochalState` current. A cancel request made in Temporal's UI (`handle.cancel()`) stops
an experiment, a trial or a task as the user's cancel or kill does. An experiment started
before the change runs to its end after it.

Real dev server and PostgreSQL; the agents are the scripted stand-ins of
test_experiment_workflow.py.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import PatchActivationInput, Worker

from agent_worker.liveness import Liveness
from common import search_attributes
from common.search_attributes import task_attributes
from common.temporal_names import (
    FINISH_EXPERIMENT,
    MASTER_TASK_QUEUE,
    TASK_WORKFLOW,
    TaskMessages,
    agent_task_queue,
    experiment_workflow_id,
    task_workflow_id,
    trial_workflow_id,
)
from deploy.master import build_worker
from deploy.temporal_server import temporal_binary
from services import tasks as task_service
from tests.master_fixtures import fresh_namespace
from tests.replay.recording import save, save_experiment
from tests.waiting import eventually, within
from tests.workflows.pool_helpers import register
from tests.workflows.test_experiment_workflow import (
    _count,
    ended,
    hang,
    make_config,
    start_agent,
    start_experiment,
    stop_agent,
    succeed,
    trial_states,
    wait_for_preemption,
)
from wire.workflow_io import RunTaskInput, RunTaskResult, RunTrialInput, RunTrialResult, TaskInput
from workflows.experiment import (
    CANCELED_END_PATCH,
    CHILD_TRIALS_PATCH,
    EXTERNAL_CANCEL_PATCH,
    FINISH_HEARTBEAT,
    FINISH_HEARTBEAT_PATCH,
)
from workflows.task import TASK_CANCEL_REQUEST_PATCH, TASK_STATUS_PATCH


async def trial_ids(pool: asyncpg.Pool, experiment_id: int) -> list[int]:
    return list(await pool.fetchval(
        "SELECT array_agg(id ORDER BY request_id) FROM trials WHERE experiment_id = $1",
        experiment_id) or [])


async def check_trials(client: Client, pool: asyncpg.Pool, experiment_id: int) -> set[str]:
    """Every trial's workflow is a child of the experiment's (parent and root), ended in the
    status of its state in the database, with its state as `EpochalState`; answers the run ids
    of the experiment's runs that started them."""
    parent = experiment_workflow_id(experiment_id)
    runs = set()
    for trial_id in await trial_ids(pool, experiment_id):
        handle = client.get_workflow_handle(trial_workflow_id(experiment_id, trial_id))
        state = await pool.fetchval("SELECT state FROM trials WHERE id = $1", trial_id)
        assert await ended(handle, 30) == state, trial_id
        described = await handle.describe()
        assert (described.parent_id, described.root_id) == (parent, parent), trial_id
        assert described.typed_search_attributes.get(search_attributes.STATE) == state
        runs.add(described.parent_run_id)
    return runs


async def children_listed(client: Client, address: str, experiment_id: int,
                          count: int) -> set[str]:
    """The workflow ids `temporal workflow list --query 'ParentWorkflowId=...'` (Temporal's
    own CLI) prints, once it prints `count` (visibility follows the history)."""
    temporal = temporal_binary()
    query = f'ParentWorkflowId="{experiment_workflow_id(experiment_id)}"'
    ids: set[str] = set()
    for _ in range(100):
        listing = await asyncio.create_subprocess_exec(
            temporal, "workflow", "list", "--address", address, "--namespace",
            client.namespace, "--query", query, "--output", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await within(listing.communicate(), 30, "temporal workflow list")
        assert listing.returncode == 0, err.decode()
        ids = {w["execution"]["workflowId"] for w in json.loads(out or b"[]")}
        if len(ids) == count:
            return ids
        await asyncio.sleep(0.1)
    raise AssertionError(f"{query} listed {sorted(ids)}, not {count} workflows")


async def test_trials_are_the_experiments_children_and_end_in_their_status(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker, temporal_address: str
) -> None:
    """A completed experiment with a trial that failed: Completed, and the trials Completed
    and Failed (reason, no stack trace), each a child of it, listed by ParentWorkflowId."""
    async def crash_lr_03(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        if inp.hparams["lr"] == 0.3:
            return RunTrialResult(exit_code=1, agent_id="fake", message="boom")
        return await succeed(inp, pool)

    agent, pool_name = await start_agent(temporal_client, pool, crash_lr_03)
    try:
        experiment_id, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name), owner="alice")
        assert await ended(handle, 60) == "COMPLETED"
    finally:
        await stop_agent(agent)
    assert await trial_states(pool, experiment_id) == ["COMPLETED", "COMPLETED", "ERROR",
                                                       "COMPLETED"]
    await check_trials(temporal_client, pool, experiment_id)  # the ERROR one Failed
    listed = await children_listed(temporal_client, temporal_address, experiment_id, 4)
    assert listed == {trial_workflow_id(experiment_id, t)
                      for t in await trial_ids(pool, experiment_id)}
    # Its end heartbeats: a master that dies while it runs has it retried within 30 s.
    scheduled = [e.activity_task_scheduled_event_attributes
                 for e in (await handle.fetch_history()).events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    [finish] = [a for a in scheduled if a.activity_type.name == FINISH_EXPERIMENT]
    assert finish.heartbeat_timeout.ToTimedelta() == FINISH_HEARTBEAT


async def crash(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
    return RunTrialResult(exit_code=1, agent_id="fake", message="boom")


async def test_an_error_a_kill_and_a_cancel_end_the_experiment_and_its_trials_so(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Every trial fails: the experiment and its trials Failed. Killed or canceled while two
    trials run: the experiment and those two Canceled."""
    for script, signal in ((crash, None), (hang, "kill"), (wait_for_preemption, "cancel")):
        agent, pool_name = await start_agent(temporal_client, pool, script)
        try:
            experiment_id, handle = await start_experiment(
                temporal_client, pool, make_config(pool_name), owner="alice")
            if signal is not None:
                await eventually(
                    lambda: _count(pool, experiment_id, "RUNNING", 2),  # noqa: B023
                    30, "2 trials to run")
                await handle.signal(signal)
            assert await ended(handle, 60) == ("ERROR" if signal is None else "CANCELED")
        finally:
            await stop_agent(agent)
        assert await trial_states(pool, experiment_id) == (
            ["ERROR"] * 4 if signal is None else ["CANCELED", "CANCELED"]), signal
        await check_trials(temporal_client, pool, experiment_id)


async def test_a_cancel_request_in_temporal_cancels_the_experiment_as_its_cancel_does(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Temporal UI's "Request Cancellation": the trials are asked to checkpoint and stop (one
    run each, exited cleanly), the rows say CANCELED, and every workflow ends Canceled."""
    agent, pool_name = await start_agent(temporal_client, pool, wait_for_preemption)
    try:
        experiment_id, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name), owner="alice")
        await eventually(lambda: _count(pool, experiment_id, "RUNNING", 2), 30,
                         "2 trials to run")
        await handle.cancel()
        assert await ended(handle, 60) == "CANCELED"
        await save_experiment(temporal_client, handle, "cancel-request")
    finally:
        await stop_agent(agent)
    assert await pool.fetchval("SELECT state FROM experiments WHERE id = $1",
                               experiment_id) == "CANCELED"
    assert await trial_states(pool, experiment_id) == ["CANCELED", "CANCELED"]
    assert [r.run_id for r in agent.runs] == [1, 1]
    await check_trials(temporal_client, pool, experiment_id)


async def test_a_cancel_request_on_one_trial_cancels_only_that_trial(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    async def lr_01_waits(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        if inp.hparams["lr"] == 0.1:
            return await wait_for_preemption(inp, pool)
        return await succeed(inp, pool)

    agent, pool_name = await start_agent(temporal_client, pool, lr_01_waits)
    try:
        experiment_id, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name), owner="alice")
        await eventually(lambda: _count(pool, experiment_id, "COMPLETED", 3), 30,
                         "the other 3 trials to complete")
        first = (await trial_ids(pool, experiment_id))[0]
        await temporal_client.get_workflow_handle(
            trial_workflow_id(experiment_id, first)).cancel()
        assert await ended(handle, 60) == "COMPLETED"
        await save_experiment(temporal_client, handle, "trial-cancel-request",
                              trial_workflow_id(experiment_id, first))
    finally:
        await stop_agent(agent)
    assert await trial_states(pool, experiment_id) == ["CANCELED", "COMPLETED", "COMPLETED",
                                                       "COMPLETED"]
    await check_trials(temporal_client, pool, experiment_id)


async def test_trials_of_every_run_of_a_continued_experiment_are_its_children(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker, temporal_address: str
) -> None:
    """Continue-as-new every few events, trials in flight across it: every trial's parent and
    root are `experiment-N` whichever run started it, and each reports its end to the run
    that is current then."""
    async def slow(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        await asyncio.sleep(0.5)
        return await succeed(inp, pool)

    agent, pool_name = await start_agent(temporal_client, pool, slow)
    try:
        experiment_id, handle = await start_experiment(
            temporal_client, pool, make_config(pool_name, name="random", max_trials=6),
            owner="alice", max_history_events=30)
        assert await ended(handle, 90) == "COMPLETED"
        await save_experiment(temporal_client, handle, "children-continue-as-new")
    finally:
        await stop_agent(agent)
    assert await trial_states(pool, experiment_id) == ["COMPLETED"] * 6
    runs = await check_trials(temporal_client, pool, experiment_id)
    assert len(runs) > 1, "every trial was started by the same run: no continue-as-new"
    listed = await children_listed(temporal_client, temporal_address, experiment_id, 6)
    assert len(listed) == 6


# -- an experiment started before issue 34 ---------------------------------------------------

ISSUE34_PATCHES = {EXTERNAL_CANCEL_PATCH, CANCELED_END_PATCH, CHILD_TRIALS_PATCH,
                   TASK_CANCEL_REQUEST_PATCH, TASK_STATUS_PATCH, FINISH_HEARTBEAT_PATCH}


def before_issue34(patch: PatchActivationInput) -> bool:
    """The worker plays the code before issue 34: none of its patches activates."""
    return patch.patch_id not in ISSUE34_PATCHES


async def test_an_experiment_started_before_the_change_runs_to_its_end_after_it(
    temporal_address: str, pool: asyncpg.Pool
) -> None:
    """A worker of the old code starts two experiments and their first trials, then the new
    code's worker takes over (a new worker: it replays their histories): one completes, the other
    is killed and ends Canceled, with the database right for both."""
    client = await fresh_namespace(temporal_address, "upgrade")
    assert await search_attributes.register(client)

    async def first_runs_wait(inp: RunTrialInput, pool: asyncpg.Pool) -> RunTrialResult:
        while not await pool.fetchval("SELECT value FROM upgrade_switch WHERE id = 1"):
            activity.heartbeat()
            await asyncio.sleep(0.1)
        return await succeed(inp, pool)

    await pool.execute("CREATE TABLE IF NOT EXISTS upgrade_switch (id int PRIMARY KEY,"
                       " value bool)")
    await pool.execute("INSERT INTO upgrade_switch VALUES (1, false)"
                       " ON CONFLICT (id) DO UPDATE SET value = false")
    agent, pool_name = await start_agent(client, pool, first_runs_wait)
    hang_agent, hang_pool = await start_agent(client, pool, hang)
    try:
        async with build_worker(client, pool, findable=True,
                                patch_activation_callback=before_issue34):
            completing, completing_handle = await start_experiment(
                client, pool, make_config(pool_name), owner="alice")
            killed, killed_handle = await start_experiment(
                client, pool, make_config(hang_pool), owner="alice")
            await eventually(lambda: _count(pool, completing, "RUNNING", 2), 30,
                             "2 trials to run before the upgrade")
            await eventually(lambda: _count(pool, killed, "RUNNING", 2), 30,
                             "2 trials to run before the upgrade")
        async with build_worker(client, pool, findable=True):
            await pool.execute("UPDATE upgrade_switch SET value = true WHERE id = 1")
            await killed_handle.signal("kill")
            assert await ended(killed_handle, 60) == "CANCELED"
            assert await ended(completing_handle, 60) == "COMPLETED"
            await save_experiment(client, killed_handle, "upgraded-killed")
            await save_experiment(client, completing_handle, "upgraded-completed")
    finally:
        await stop_agent(agent)
        await stop_agent(hang_agent)
        await pool.execute("DROP TABLE IF EXISTS upgrade_switch")
    assert await trial_states(pool, completing) == ["COMPLETED"] * 4
    assert await trial_states(pool, killed) == ["CANCELED", "CANCELED"]
    assert await pool.fetchval("SELECT state FROM experiments WHERE id = $1",
                               killed) == "CANCELED"
    # A run that started trials the old way goes on so (patched() answers as it first did):
    # its trials have no parent and end as they did (Completed).
    for trial_id in await trial_ids(pool, completing):
        described = await client.get_workflow_handle(
            trial_workflow_id(completing, trial_id)).describe()
        assert described.parent_id is None
        assert described.status == WorkflowExecutionStatus.COMPLETED


# -- interactive tasks -----------------------------------------------------------------------

class FakeTaskAgent:
    """Runs `run_task` as the test says: exit with a code, or run until cancelled."""

    def __init__(self) -> None:
        self.exit_codes: dict[str, int | None] = {}  # None: until cancelled

    @activity.defn(name="run_task")
    async def run_task(self, inp: RunTaskInput) -> RunTaskResult:
        code = self.exit_codes[inp.task_id]
        while code is None:
            activity.heartbeat()
            await asyncio.sleep(0.1)
        return RunTaskResult(exit_code=code, agent_id="fake",
                             message="" if code == 0 else f"exited with code {code}")


async def start_task(client: Client, pool: asyncpg.Pool, pool_name: str) -> tuple[
        str, WorkflowHandle[Any, str]]:
    """A command's row and workflow, as the API starts them (search attributes included)."""
    task_id = str(uuid.uuid4())
    await task_service.insert_task(
        pool, task_id=task_id, task_type="COMMAND", owner_id=1, workspace_id=1,
        description="Command (test)", config={}, context=None, resource_pool=pool_name,
        slots=1, priority=None, secret=secrets.token_urlsafe(16), public_key=None,
        private_key=None, experiment_ids=[], trial_ids=[])
    handle = await client.start_workflow(
        TASK_WORKFLOW, TaskInput(task_id=task_id, task_type="COMMAND",
                                 resource_pool=pool_name, slots=1),
        id=task_workflow_id(task_id), task_queue=MASTER_TASK_QUEUE, result_type=str,
        search_attributes=task_attributes("alice", "Command (test)"))
    return task_id, handle


async def test_tasks_end_in_their_status_and_show_their_state(
    temporal_client: Client, pool: asyncpg.Pool, master_worker: Worker
) -> None:
    """Exit 0 Completed, exit 1 Failed, killed Canceled, a cancel request kills it too; the
    row says TERMINATED with why, and `EpochalState` follows the row (RUNNING once the agent
    says it runs)."""
    pool_name = f"test-{uuid.uuid4().hex[:8]}"
    agent_id = f"{pool_name}-fake"
    fake = FakeTaskAgent()
    worker = Worker(temporal_client, task_queue=agent_task_queue(agent_id),
                    activities=[fake.run_task, Liveness(agent_id, beat=0.5).agent_liveness],
                    max_heartbeat_throttle_interval=timedelta(seconds=1))
    async with worker:
        await register(temporal_client, pool_name, agent_id, 8)
        ends = {}
        for code, stop in ((0, None), (1, None), (None, "kill"), (None, "cancel")):
            task_id, handle = await start_task(temporal_client, pool, pool_name)
            fake.exit_codes[task_id] = code
            if stop is not None:
                await eventually(lambda: _task_state(pool, task_id, "STARTING"),  # noqa: B023
                                 30, f"task {task_id} to start")
                await handle.signal(TaskMessages.RUNNING)

                async def shows_running() -> bool:
                    described = await handle.describe()  # noqa: B023
                    return described.typed_search_attributes.get(
                        search_attributes.STATE) == "RUNNING"

                await eventually(shows_running, 30, "EpochalState RUNNING")
                if stop == "kill":
                    await handle.signal(TaskMessages.KILL)
                else:
                    await handle.cancel()
            outcome = await ended(handle, 60)
            save({(0, None): "completed-task", (1, None): "failed-task",
                  (None, "kill"): "killed-task", (None, "cancel"): "cancel-request-task"}[
                      code, stop], await handle.fetch_history())
            ends[code, stop] = (outcome, (await handle.describe())
                                .typed_search_attributes.get(search_attributes.STATE),
                                await pool.fetchval(
                                    "SELECT exit_status FROM tasks WHERE id = $1", task_id))
    assert ends == {
        (0, None): ("COMPLETED", "TERMINATED", "exited with code 0"),
        (1, None): ("ERROR", "TERMINATED", "exited with code 1"),
        (None, "kill"): ("CANCELED", "TERMINATED", "killed"),
        (None, "cancel"): ("CANCELED", "TERMINATED", "killed"),
    }


async def _task_state(pool: asyncpg.Pool, task_id: str, state: str) -> bool:
    return state == await pool.fetchval("SELECT state FROM tasks WHERE id = $1", task_id)

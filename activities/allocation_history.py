"""The record of who used what: each allocation of slots (a trial run's, an interactive task's)
written as it starts and closed as it ends, by the activities that record their states
(`experiment_store.record_trial_state`, `task_store.record_task_state`), in their transactions.

Workflows know nothing of it: the start is the trial's RUNNING with its run id (after the pool
granted the slots) or the task's STARTING, the end the trial's next state or the task's
TERMINATED. Both are idempotent, as activities must be (Temporal retries them): a start writes
nothing while its allocation's row is open (keyed on the allocation id), an end closes only
open rows. A run whose end was never written (the master died, and the trial's next record is
a new run or its end) is closed by that next record: a trial has at most one open row.

Who and where are read from the database when the allocation starts (the workflows do not
know them): the experiment's owner, workspace, labels, `resources.slots_per_trial` and
`resources.resource_pool`, or the task's row. The table is described in
activities/migrations/0024_allocation_history.sql.
"""

from __future__ import annotations

import asyncpg

from common.states import TaskState
from common.temporal_names import allocation_id, task_allocation_id, task_id

# The open rows a trial's record closes: all of them, or all but the run it starts.
_CLOSE_TRIAL = (
    "UPDATE allocation_history SET end_time = greatest(start_time, now())"
    " WHERE trial_id = $1 AND end_time IS NULL AND allocation_id IS DISTINCT FROM $2")

# A trial run's start: who and where from its experiment, its slots and pool from the config
# (the API stored it normalised, so both are there; the defaults only guard old rows).
_START_RUN = """
INSERT INTO allocation_history (
    allocation_id, task_id, task_type, experiment_id, trial_id, run_id, user_id, username,
    workspace_id, workspace_name, labels, resource_pool, slots, agent_ids, start_time)
SELECT $4, $5, 'TRIAL', e.id, t.id, $2,
       u.id, e.owner, w.id, w.name, e.labels,
       coalesce(e.config -> 'resources' ->> 'resource_pool', 'default'),
       coalesce((e.config -> 'resources' ->> 'slots_per_trial')::int, 1),
       $3::text[], now()
FROM trials t JOIN experiments e ON e.id = t.experiment_id
LEFT JOIN projects p ON p.id = e.project_id LEFT JOIN workspaces w ON w.id = p.workspace_id
LEFT JOIN users u ON u.username = e.owner
WHERE t.id = $1
ON CONFLICT (allocation_id) WHERE end_time IS NULL DO NOTHING
"""

# A task's start: it runs once, so once any row of its allocation exists (or it has already
# terminated: a late STARTING) nothing more is written.
_START_TASK = f"""
INSERT INTO allocation_history (
    allocation_id, task_id, task_type, user_id, username, workspace_id, workspace_name,
    resource_pool, slots, agent_ids, start_time)
SELECT $2, t.id, t.task_type, t.owner_id, coalesce(u.username, ''), w.id, w.name,
       t.resource_pool, t.slots,
       CASE WHEN $3::text IS NULL THEN '{{}}'::text[] ELSE ARRAY[$3::text] END, now()
FROM tasks t LEFT JOIN users u ON u.id = t.owner_id LEFT JOIN workspaces w ON w.id = t.workspace_id
WHERE t.id = $1 AND t.state <> '{TaskState.TERMINATED}'
  AND NOT EXISTS (SELECT 1 FROM allocation_history WHERE allocation_id = $2)
ON CONFLICT (allocation_id) WHERE end_time IS NULL DO NOTHING
"""


async def record_trial_allocation(conn: asyncpg.Connection, trial_id: int,
                                  run_id: int | None, agent_ids: list[str]) -> None:
    """A trial's state was recorded: with a run id (RUNNING) its run's allocation starts on
    `agent_ids` (the chief first) and any other open one of the trial ends; without, every open
    one ends."""
    if run_id is None:
        await conn.execute(_CLOSE_TRIAL, trial_id, None)
        return
    experiment_id = await conn.fetchval(
        "SELECT experiment_id FROM trials WHERE id = $1", trial_id)
    if experiment_id is None:
        return
    own = allocation_id(experiment_id, trial_id, run_id)
    await conn.execute(_CLOSE_TRIAL, trial_id, own)
    await conn.execute(_START_RUN, trial_id, run_id, agent_ids, own,
                       task_id(experiment_id, trial_id))


async def start_task_allocation(conn: asyncpg.Connection, task: str,
                                agent_id: str | None) -> None:
    """The task got its slots (STARTING): its one allocation starts."""
    await conn.execute(_START_TASK, task, task_allocation_id(task), agent_id)


async def end_task_allocation(conn: asyncpg.Connection, task: str) -> None:
    """The task terminated: its allocation, if it had one, ends."""
    await conn.execute(
        "UPDATE allocation_history SET end_time = greatest(start_time, now())"
        " WHERE allocation_id = $1 AND end_time IS NULL", task_allocation_id(task))

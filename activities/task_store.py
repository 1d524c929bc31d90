"""Activities that record interactive tasks' state for TaskWorkflow (workflows/task.py).

Idempotent, as every activity: Temporal may run one twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
from temporalio import activity

from activities.allocation_history import end_task_allocation, start_task_allocation
from common.states import TaskState
from common.temporal_names import RECORD_TASK_STATE, TASK_IDLE_SECONDS
from wire.workflow_io import RecordTaskStateInput


class TaskStore:
    """Activities bound to the master's connection pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @activity.defn(name=RECORD_TASK_STATE)
    async def record_task_state(self, inp: RecordTaskStateInput) -> None:
        """A terminated task stays so (a late STARTING does not revive it); at the end its
        service is no longer reachable and the session its code held is revoked. STARTING
        starts its allocation's record, TERMINATED ends it (activities/allocation_history.py)."""
        async with self._pool.acquire() as conn, conn.transaction():
            if inp.state != TaskState.TERMINATED:
                await conn.execute(
                    "UPDATE tasks SET state = $2, agent_id = coalesce($3, agent_id),"
                    " started_at = CASE WHEN $2 = $4 THEN coalesce(started_at, now())"
                    " ELSE started_at END"
                    " WHERE id = $1 AND state <> $5 AND NOT ($2 = $4 AND state = $6)",
                    inp.task_id, inp.state, inp.agent_id, TaskState.STARTING,
                    TaskState.TERMINATED, TaskState.RUNNING)
                if inp.state == TaskState.STARTING:  # the slots are granted
                    await start_task_allocation(conn, inp.task_id, inp.agent_id)
                return
            session: bytes | None = await conn.fetchval(
                "SELECT session_hash FROM tasks WHERE id = $1 FOR UPDATE", inp.task_id)
            await conn.execute(
                f"UPDATE tasks SET state = '{TaskState.TERMINATED}', ready = false,"
                " proxy_address = NULL,"
                " agent_id = coalesce($3, agent_id), exit_status = coalesce(exit_status, $2),"
                " ended_at = coalesce(ended_at, now()), session_hash = NULL WHERE id = $1",
                inp.task_id, inp.exit_status, inp.agent_id)
            if session is not None:
                await conn.execute("DELETE FROM user_sessions WHERE token_hash = $1", session)
            await end_task_allocation(conn, inp.task_id)

    @activity.defn(name=TASK_IDLE_SECONDS)
    async def task_idle_seconds(self, task_id: str) -> float:
        """Seconds since the task's proxy last carried a request, or since it became ready
        (0 while it starts, and for a task not found)."""
        seconds = await self._pool.fetchval(
            "SELECT CASE WHEN ready THEN extract(epoch FROM now() - last_activity) ELSE 0 END"
            " FROM tasks WHERE id = $1", task_id)
        return float(seconds or 0.0)

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this class, for the worker."""
        return [self.record_task_state, self.task_idle_seconds]

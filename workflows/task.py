"""TaskWorkflow: one interactive task (a command, notebook, shell or TensorBoard) from its request
for slots to its end.

It asks its resource pool for slots as a trial run does (workflows/allocation.py; the pool
orders it by priority with the trials), runs the agent's `run_task` activity on the granted
agent's queue, and ends when the task's process exits, when the user kills it (signal `kill`:
the activity is cancelled, which stops its processes) or when it has served no request through
the master's proxy for `idle_timeout`. A task runs once: a lost agent ends it, as on
Determined. The slots go back to the pool at the end, and the row says TERMINATED with why.

Like the trial, it runs outside Temporal's sandbox and keeps its determinism by the same rules:
no IO, clock or randomness here (activities do those).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.temporal_names import (
        RECORD_TASK_STATE,
        RUN_TASK,
        TASK_IDLE_SECONDS,
        TASK_WORKFLOW,
        TaskMessages,
        task_allocation_id,
    )
    from workflows.allocation import Allocator, Resources
    from workflows.db_activities import db_activity
    from workflows.pool_types import DEFAULT_PRIORITY, Allocation, SlotFailure, SlotRequest
    from workflows.types import RecordTaskStateInput, RunTaskInput, RunTaskResult, TaskInput

RUN_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
RUN_PICKUP_TIMEOUT = timedelta(seconds=60)  # the granted agent must start the task by then
RUN_MAX_DURATION = timedelta(days=365)
# How often an idle_timeout is checked: at most this long past the timeout a task is stopped.
IDLE_CHECK_EVERY = timedelta(seconds=60)


@workflow.defn(name=TASK_WORKFLOW, sandboxed=False)
class TaskWorkflow:
    def __init__(self) -> None:
        self._kill = False
        self._allocator = Allocator()
        self._allocator.local = True
        self._agent_id: str | None = None

    @workflow.run
    async def run(self, inp: TaskInput) -> str:
        resources = Resources(pool=inp.resource_pool, slots=inp.slots,
                              priority=inp.priority or DEFAULT_PRIORITY, max_slots=None)
        request = SlotRequest(
            allocation_id=task_allocation_id(inp.task_id),
            workflow_id=workflow.info().workflow_id,
            experiment_id=0,  # the pool groups tasks apart from every experiment's trials
            trial_id=0,
            slots=inp.slots,
            priority=resources.priority,
        )
        try:
            allocation = await self._allocator.acquire(resources, request, lambda: self._kill)
        except ApplicationError as err:  # more slots than any agent of the pool has
            return await self._end(inp, f"cannot schedule the task: {err.message}")
        if allocation is None:
            return await self._end(inp, "killed while it waited for slots")
        try:
            self._agent_id = allocation.agent_id
            await self._record(inp, "STARTING")
            status = await self._run(inp, allocation)
        finally:
            await self._allocator.release(resources, allocation.allocation_id)
        return await self._end(inp, status)

    async def _run(self, inp: TaskInput, allocation: Allocation) -> str:
        """Run the task on its agent until it exits, is killed or idles out; answers why it
        ended, for people."""
        handle = workflow.start_activity(
            RUN_TASK,
            RunTaskInput(task_id=inp.task_id, task_type=inp.task_type,
                         slot_ids=list(allocation.slot_ids)),
            result_type=RunTaskResult,
            task_queue=allocation.task_queue,
            schedule_to_start_timeout=RUN_PICKUP_TIMEOUT,
            start_to_close_timeout=RUN_MAX_DURATION,
            heartbeat_timeout=RUN_HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        stopped_for = ""
        while not handle.done():
            check_in = (min(IDLE_CHECK_EVERY, timedelta(seconds=inp.idle_timeout_seconds))
                        if inp.idle_timeout_seconds else None)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: handle.done() or self._kill,
                                              timeout=check_in)
            if handle.done():
                break
            if self._kill:
                stopped_for = "killed"
            elif inp.idle_timeout_seconds and await self._idle_for(inp) >= (
                    inp.idle_timeout_seconds):
                stopped_for = (f"stopped after {inp.idle_timeout_seconds:g} s without activity"
                               " (idle_timeout)")
            if stopped_for:
                await self._record(inp, "TERMINATING")
                handle.cancel()
                break
        try:
            result = await handle
        except ActivityError as err:
            if stopped_for:
                return stopped_for
            cause = err.cause
            detail = cause.message if isinstance(cause, ApplicationError) else str(
                cause or err)
            return f"failed: {detail}"
        if stopped_for:
            return stopped_for
        return result.message or f"exited with code {result.exit_code}"

    async def _idle_for(self, inp: TaskInput) -> float:
        """Seconds since the task's proxy last carried a request (the master's clock)."""
        seconds: float = await db_activity(TASK_IDLE_SECONDS, inp.task_id, float, local=True)
        return seconds

    async def _record(self, inp: TaskInput, state: str, exit_status: str | None = None) -> None:
        await db_activity(
            RECORD_TASK_STATE,
            RecordTaskStateInput(task_id=inp.task_id, state=state, agent_id=self._agent_id,
                                 exit_status=exit_status),
            local=True)

    async def _end(self, inp: TaskInput, exit_status: str) -> str:
        await self._record(inp, "TERMINATED", exit_status)
        return exit_status

    @workflow.signal(name=TaskMessages.KILL)
    def kill(self) -> None:
        """The user's kill: stop the task now (while it waits for slots too)."""
        self._kill = True

    @workflow.signal(name=TaskMessages.SLOTS_GRANTED)
    def slots_granted(self, allocation: Allocation) -> None:
        self._allocator.granted(allocation)

    @workflow.signal(name=TaskMessages.SLOTS_FAILED)
    def slots_failed(self, failure: SlotFailure) -> None:
        self._allocator.failed(failure)

    @workflow.signal(name=TaskMessages.SLOTS_WAITING)
    def slots_waiting(self, _waiting: object) -> None:
        """The pool says the request is larger than the pool is now; the task keeps waiting
        (its state stays QUEUED)."""

"""TaskWorkflow: one interactive task (a command, notebook, shell or TensorBoard) from its request
for slots to its end.

It asks its resource pool for slots as a trial run does (workflows/allocation.py; the pool
orders it by priority with the trials), runs the agent's `run_task` activity on the granted
agent's queue, and ends when the task's process exits, when the user kills it (signal `kill`:
the activity is cancelled, which stops its processes) or when it has served no request through
the master's proxy for `idle_timeout`. A task runs once: a lost agent ends it, as on
Determined. The slots go back to the pool at the end, and the row says TERMINATED with why.

It ends in Temporal's status that matches how it ended (workflows/temporal_status.py):
Completed when its process exited 0, Failed when it exited otherwise or could not run, Canceled
when killed or stopped by its idle_timeout; a cancel request (Temporal's UI) kills it as the
user's kill does.
One started with Epochal's search attributes keeps `EpochalState` current.

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
    from common.states import EndState, TaskState
    from common.temporal_names import (
        RUN_TASK,
        TASK_WORKFLOW,
        TaskMessages,
        task_allocation_id,
    )
    from wire.pools import DEFAULT_PRIORITY, Allocation, Preemption, SlotFailure, SlotRequest
    from wire.workflow_io import RecordTaskStateInput, RunTaskInput, RunTaskResult, TaskInput
    from workflows.allocation import Allocator, Resources
    from workflows.db_activities import RECORD_TASK_STATE_CALL, TASK_IDLE_SECONDS_CALL
    from workflows.temporal_status import (
        ShownState,
        cancel_requested,
        end_canceled,
        end_failed,
        run_shielded,
    )

RUN_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
RUN_PICKUP_TIMEOUT = timedelta(seconds=60)  # the granted agent must start the task by then
RUN_MAX_DURATION = timedelta(days=365)
# How often an idle_timeout is checked: at most this long past the timeout a task is stopped.
IDLE_CHECK_EVERY = timedelta(seconds=60)
# Issue 34: a cancel request kills the task (checked at its start), and a task that did not
# complete ends Failed or Canceled (checked at its end: a task started before ends so too).
TASK_CANCEL_REQUEST_PATCH = "task-takes-cancel-requests"
TASK_STATUS_PATCH = "task-ends-in-its-status"
TASK_PREEMPTION_PATCH = "task-preempted-by-its-pool"  # issue 38


@workflow.defn(name=TASK_WORKFLOW, sandboxed=False)
class TaskWorkflow:
    def __init__(self) -> None:
        self._kill_signaled = False
        self._takes_cancel_requests = False  # TASK_CANCEL_REQUEST_PATCH
        self._shown = ShownState()
        self._ended_as = EndState.COMPLETED  # the status the workflow ends in
        self._allocator = Allocator()
        self._allocator.local = True
        self._agent_id: str | None = None
        self._preempted_for = ""  # the pool's reason, where the pool preempts tasks

    @property
    def _kill(self) -> bool:
        """The user's kill, by signal or as a cancel request."""
        return self._kill_signaled or (self._takes_cancel_requests and cancel_requested())

    @workflow.run
    async def run(self, inp: TaskInput) -> str:
        if workflow.patched(TASK_CANCEL_REQUEST_PATCH):
            self._takes_cancel_requests = True
            self._shown.start(TaskState.QUEUED)
            return await run_shielded(self._run_task(inp))
        return await self._run_task(inp)

    async def _run_task(self, inp: TaskInput) -> str:
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
            self._ended_as = EndState.ERROR
            return await self._end(inp, f"cannot schedule the task: {err.message}")
        if allocation is None:
            self._ended_as = EndState.CANCELED
            return await self._end(inp, "killed while it waited for slots")
        async with self._allocator.held(resources, allocation.allocation_id):
            self._agent_id = allocation.agent_id
            await self._record(inp, TaskState.STARTING)
            status = await self._run(inp, allocation)
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
            # The master's agent timeout, from the input (the same on replay), if it passed one.
            heartbeat_timeout=(timedelta(seconds=inp.agent_timeout_seconds)
                               if inp.agent_timeout_seconds else RUN_HEARTBEAT_TIMEOUT),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        stopped_for = ""
        while not handle.done():
            check_in = (min(IDLE_CHECK_EVERY, timedelta(seconds=inp.idle_timeout_seconds))
                        if inp.idle_timeout_seconds else None)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: handle.done() or self._kill or bool(self._preempted_for),
                    timeout=check_in)
            if handle.done():
                break
            if self._kill:
                stopped_for = "killed"
            elif self._preempted_for:
                stopped_for = f"preempted: {self._preempted_for}"
            elif inp.idle_timeout_seconds and await self._idle_for(inp) >= (
                    inp.idle_timeout_seconds):
                stopped_for = (f"stopped after {inp.idle_timeout_seconds:g} s without activity"
                               " (idle_timeout)")
            if stopped_for:
                await self._record(inp, TaskState.TERMINATING)
                handle.cancel()
                break
        try:
            result = await handle
        except ActivityError as err:
            if stopped_for:
                self._ended_as = EndState.CANCELED
                return stopped_for
            cause = err.cause
            detail = cause.message if isinstance(cause, ApplicationError) else str(
                cause or err)
            self._ended_as = EndState.ERROR
            return f"failed: {detail}"
        if stopped_for:
            self._ended_as = EndState.CANCELED
            return stopped_for
        if result.exit_code != 0:
            self._ended_as = EndState.ERROR
        return result.message or f"exited with code {result.exit_code}"

    async def _idle_for(self, inp: TaskInput) -> float:
        """Seconds since the task's proxy last carried a request (the master's clock)."""
        return await TASK_IDLE_SECONDS_CALL(inp.task_id, local=True)

    async def _record(self, inp: TaskInput, state: TaskState,
                      exit_status: str | None = None) -> None:
        await RECORD_TASK_STATE_CALL(
            RecordTaskStateInput(task_id=inp.task_id, state=state, agent_id=self._agent_id,
                                 exit_status=exit_status),
            local=True)
        self._shown.show(state)

    async def _end(self, inp: TaskInput, exit_status: str) -> str:
        await self._record(inp, TaskState.TERMINATED, exit_status)
        if self._ended_as != EndState.COMPLETED and workflow.patched(TASK_STATUS_PATCH):
            if self._ended_as == EndState.ERROR:
                end_failed(f"task {inp.task_id}: {exit_status}", "TaskError")
            await end_canceled(exit_status)
        return exit_status

    @workflow.signal(name=TaskMessages.KILL)
    def kill(self) -> None:
        """The user's kill: stop the task now (while it waits for slots too)."""
        self._kill_signaled = True

    @workflow.signal(name=TaskMessages.PREEMPT)
    def preempt(self, preemption: Preemption) -> None:
        """The pool takes the task's slots for higher-priority work (only a pool configured with
        `preempt_tasks` does): a task cannot checkpoint, so it stops as if killed."""
        if workflow.patched(TASK_PREEMPTION_PATCH):
            self._preempted_for = preemption.reason

    @workflow.signal(name=TaskMessages.RUNNING)
    def running(self) -> None:
        """The agent said the task runs (the API wrote RUNNING in its row)."""
        if self._shown.state in (TaskState.QUEUED, TaskState.STARTING):
            self._shown.show(TaskState.RUNNING)

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

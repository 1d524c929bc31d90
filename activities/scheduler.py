"""Master-side activities between trial workflows and the resource-pool scheduler.

A workflow cannot send an update to another workflow, so a trial asks its pool for slots through
`request_slots`, an activity that sends the `request_slots` update (starting the pool workflow if
it does not run yet). The update id is the allocation id: Temporal drops a duplicate within one
pool run and the pool itself drops one across runs, so a retried activity never allocates twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from common.temporal_names import (
    RELEASE_SLOTS_ACTIVITY,
    REQUEST_SLOTS_ACTIVITY,
    RESOURCE_POOL_WORKFLOW,
    PoolMessages,
    resource_pool_workflow_id,
)
from workflows.pool_types import (
    PoolInput,
    ReleaseSlotsInput,
    RequestSlotsInput,
    SlotRelease,
    SlotReply,
)


def _update_failure(err: WorkflowUpdateFailedError) -> ApplicationError:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or err), type="SlotRequestFailed", non_retryable=True)


class SchedulerActivities:
    """Activities bound to the master's Temporal client."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=REQUEST_SLOTS_ACTIVITY)
    async def request_slots(self, inp: RequestSlotsInput) -> SlotReply:
        handle = self._client.get_workflow_handle(resource_pool_workflow_id(inp.pool))
        try:
            try:
                reply: SlotReply = await handle.execute_update(
                    PoolMessages.REQUEST_SLOTS, inp.request, id=inp.request.allocation_id,
                    result_type=SlotReply)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                reply = await self._request_starting_pool(inp)  # a pool nobody started yet
        except WorkflowUpdateFailedError as err:
            raise _update_failure(err) from None
        return reply

    async def _request_starting_pool(self, inp: RequestSlotsInput) -> SlotReply:
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            RESOURCE_POOL_WORKFLOW,
            PoolInput(name=inp.pool),
            id=resource_pool_workflow_id(inp.pool),
            task_queue=inp.master_task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        reply: SlotReply = await self._client.execute_update_with_start_workflow(
            PoolMessages.REQUEST_SLOTS,
            inp.request,
            start_workflow_operation=start,
            id=inp.request.allocation_id,
            result_type=SlotReply,
        )
        return reply

    @activity.defn(name=RELEASE_SLOTS_ACTIVITY)
    async def release_slots(self, inp: ReleaseSlotsInput) -> bool:
        handle = self._client.get_workflow_handle(resource_pool_workflow_id(inp.pool))
        try:
            held: bool = await handle.execute_update(
                PoolMessages.RELEASE_SLOTS,
                SlotRelease(allocation_id=inp.allocation_id),
                id=f"release-{inp.allocation_id}",
                result_type=bool,
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False  # no pool, nothing held
            raise
        return held

    def all(self) -> list[Callable[..., Any]]:
        return [self.request_slots, self.release_slots]

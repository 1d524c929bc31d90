"""Master-side activities between trial workflows (and tasks) and the resource-pool scheduler.

One protocol each way. A workflow cannot send an update to another workflow, so a trial asks its
pool for slots through `request_slots`, an activity that sends the pool's `request_slots` update
(starting the pool workflow if it does not run yet): "granted" with the slots when the pool has
them now, else "queued", and the grant follows by the `slots_granted` signal. The update id is
the allocation id: Temporal drops a duplicate within one pool run and the pool itself drops one
across runs, so a retried activity never allocates twice. `release_slots` sends the `release`
signal: it needs no answer.

Temporal admits 10 updates in flight per workflow by default (`history.maxInFlightUpdates`): at
most UPDATES_IN_FLIGHT requests from this master are in flight to a pool, and the others of a
burst wait here for room. An update lives one scheduling pass of the pool (which takes every
request that has arrived), so the wait is short. Before issue 36 such requests went as the
pool's `request` signal instead: the pool keeps that signal for trials started before
LOCAL_CALLS_PATCH (workflows/resource_pool.py), which send it themselves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.pool_start import pool_start_operation
from common.temporal_names import (
    RELEASE_SLOTS_ACTIVITY,
    REQUEST_SLOTS_ACTIVITY,
    PoolMessages,
    resource_pool_workflow_id,
)
from wire.pools import (
    ReleaseSlotsInput,
    RequestSlotsInput,
    SlotRelease,
    SlotReply,
    SlotRequest,
)

UPDATES_IN_FLIGHT = 8  # per pool, from this master; Temporal's default cap is 10
OWNERS_KEPT = 4096  # experiments and tasks whose owner and workspace are remembered
OWNER_TTL_SECONDS = 30.0  # then read again: an experiment may move to another workspace

# Who a request is for, and the cap of their workspace (workspaces.max_slots).
_TRIAL_OWNER = """
SELECT u.id AS owner_id, p.workspace_id, w.max_slots
FROM experiments e JOIN projects p ON p.id = e.project_id JOIN workspaces w ON w.id = p.workspace_id
LEFT JOIN users u ON u.username = e.owner
WHERE e.id = $1"""
_TASK_OWNER = """
SELECT t.owner_id, t.workspace_id, w.max_slots
FROM tasks t JOIN workspaces w ON w.id = t.workspace_id
WHERE t.id = $1"""


def _update_failure(err: WorkflowUpdateFailedError) -> ApplicationError:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or err), type="SlotRequestFailed", non_retryable=True)


class SchedulerActivities:
    """Activities bound to the master's Temporal client."""

    def __init__(self, client: Client, db: asyncpg.Pool | None = None) -> None:
        self._client = client
        self._db = db  # None (benches): requests go without owners, as before issue 38
        self._updates: dict[str, asyncio.Semaphore] = {}  # per pool
        self._owners: dict[str, tuple[float, tuple[int | None, int | None, int | None]]] = {}

    async def _owner(self, request: SlotRequest) -> tuple[int | None, int | None, int | None]:
        """(user, workspace, the workspace's slot cap) of the experiment or task asking."""
        if self._db is None:
            return None, None, None
        task = request.experiment_id == 0
        key = request.allocation_id.rsplit(".", 1)[0] if task else str(request.experiment_id)
        known = self._owners.get(key)
        if known is not None and time.monotonic() - known[0] < OWNER_TTL_SECONDS:
            return known[1]
        try:
            row = (await self._db.fetchrow(_TASK_OWNER, key) if task
                   else await self._db.fetchrow(_TRIAL_OWNER, request.experiment_id))
        except (OSError, asyncpg.PostgresError) as err:  # scheduling goes on without them
            activity.logger.warning("who asks for %s is unknown: %s", request.allocation_id, err)
            return None, None, None
        owner = (row["owner_id"], row["workspace_id"], row["max_slots"]) if row else (
            None, None, None)
        self._owners[key] = (time.monotonic(), owner)
        while len(self._owners) > OWNERS_KEPT:
            del self._owners[next(iter(self._owners))]
        return owner

    @activity.defn(name=REQUEST_SLOTS_ACTIVITY)
    async def request_slots(self, inp: RequestSlotsInput) -> SlotReply:
        """The pool's update, with who asks filled in: the pool shares slots fairly between
        workspaces and users and caps a workspace (the trial's workflow does not know them)."""
        request = inp.request
        request.user_id, request.workspace_id, request.workspace_max_slots = (
            await self._owner(request))
        request.task = request.experiment_id == 0
        handle = self._client.get_workflow_handle(resource_pool_workflow_id(inp.pool))
        updates = self._updates.setdefault(inp.pool, asyncio.Semaphore(UPDATES_IN_FLIGHT))
        async with updates:  # a burst waits for room under Temporal's cap
            try:
                reply: SlotReply = await handle.execute_update(
                    PoolMessages.REQUEST_SLOTS, inp.request, id=inp.request.allocation_id,
                    result_type=SlotReply)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return await self._request_starting_pool(inp)  # a pool nobody started yet
            except WorkflowUpdateFailedError as err:
                raise _update_failure(err) from None
        return reply

    async def _request_starting_pool(self, inp: RequestSlotsInput) -> SlotReply:
        start = pool_start_operation(inp.pool, inp.master_task_queue)
        try:
            reply: SlotReply = await self._client.execute_update_with_start_workflow(
                PoolMessages.REQUEST_SLOTS,
                inp.request,
                start_workflow_operation=start,
                id=inp.request.allocation_id,
                result_type=SlotReply,
            )
        except WorkflowUpdateFailedError as err:
            raise _update_failure(err) from None
        return reply

    @activity.defn(name=RELEASE_SLOTS_ACTIVITY)
    async def release_slots(self, inp: ReleaseSlotsInput) -> bool:
        """False when the pool does not run (nothing is held)."""
        handle = self._client.get_workflow_handle(resource_pool_workflow_id(inp.pool))
        try:
            await handle.signal(PoolMessages.RELEASE, SlotRelease(allocation_id=inp.allocation_id))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    def all(self) -> list[Callable[..., Any]]:
        return [self.request_slots, self.release_slots]

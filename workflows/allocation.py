"""How a trial workflow gets slots from its resource pool before a run and gives them back after.

A `local` allocator (every trial from LOCAL_CALLS_REVISION on, every task) uses one protocol
each way, through local activities: `acquire` runs `request_slots`, which sends the pool's
update of that name (starting the pool if it does not run yet) and answers with the grant when
the pool has the slots now (no signal either way); else the grant comes by signal
`slots_granted` (or `slots_failed`), which the workflow hands to `granted`/`failed`. `release`
runs `release_slots`, which sends the pool's `release` signal through the master's client (the
pool ignores a repeated release).

The other allocator is the old path, kept while a trial of revision 0 may run (one started by
an experiment before LOCAL_CALLS_PATCH; its history replays only so): it signals the pool
itself (`request`, `release`), and only when the pool does not run yet does the activity start
it with the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.expconf import ResourcesConfig
    from common.states import AllocationState
    from common.temporal_names import (
        MASTER_TASK_QUEUE,
        PoolMessages,
        resource_pool_workflow_id,
    )
    from wire.pools import (
        DEFAULT_PRIORITY,
        Allocation,
        ReleaseSlotsInput,
        RequestSlotsInput,
        SlotFailure,
        SlotRelease,
        SlotReply,
        SlotRequest,
    )
    from workflows.db_activities import RELEASE_SLOTS_CALL, REQUEST_SLOTS_CALL


@dataclass(frozen=True)
class Resources:
    """What a trial asks its pool for, from the experiment config's `resources`."""

    pool: str
    slots: int
    priority: int
    max_slots: int | None

    @classmethod
    def of(cls, config: ResourcesConfig) -> Resources:
        """The config's `resources` (the model's defaults filled in); a config without a priority
        gets the pool's default one."""
        return cls(pool=config.resource_pool, slots=config.slots_per_trial,
                   priority=config.priority or DEFAULT_PRIORITY, max_slots=config.max_slots)


class Allocator:
    """A trial's side of the pool protocol; one per trial workflow."""

    def __init__(self) -> None:
        self._granted: dict[str, Allocation] = {}
        self._failed: dict[str, str] = {}
        # Messages through local activities (set from the trial's input); False only for a
        # trial of revision 0 (the old path, until LOCAL_CALLS_PATCH's old paths go).
        self.local = False

    def granted(self, allocation: Allocation) -> None:
        """The pool's `slots_granted` signal (duplicates are harmless)."""
        self._granted[allocation.allocation_id] = allocation

    def failed(self, failure: SlotFailure) -> None:
        """The pool's `slots_failed` signal: the request can never be granted."""
        self._failed[failure.allocation_id] = failure.message

    async def acquire(
        self, resources: Resources, request: SlotRequest, give_up: Callable[[], bool]
    ) -> Allocation | None:
        """Slots for one run; None if `give_up()` turned true while waiting (request withdrawn).

        Raises a non-retryable ApplicationError when the request can never be granted, e.g.
        more slots than the pool's biggest agent has.
        """
        key = request.allocation_id
        if self.local:
            reply = await self._request_slots(resources, request)
            if reply.status == AllocationState.GRANTED and reply.allocation is not None:
                return reply.allocation
        else:
            pool = workflow.get_external_workflow_handle(
                resource_pool_workflow_id(resources.pool))
            try:
                await pool.signal(PoolMessages.REQUEST, request)
            except Exception:  # the pool does not run yet: the activity starts it with the request
                reply = await self._request_slots(resources, request)
                if reply.status == AllocationState.GRANTED and reply.allocation is not None:
                    return reply.allocation
        await workflow.wait_condition(
            lambda: key in self._granted or key in self._failed or give_up())
        if key in self._granted:
            return self._granted.pop(key)
        if key in self._failed:
            raise ApplicationError(self._failed.pop(key), type="SlotRequestFailed",
                                   non_retryable=True)
        await self.release(resources, key)
        return None

    async def _request_slots(self, resources: Resources, request: SlotRequest) -> SlotReply:
        """The pool's `request_slots` update through the master's activity (which starts the
        pool if it does not run yet)."""
        inp = RequestSlotsInput(pool=resources.pool, request=request,
                                master_task_queue=MASTER_TASK_QUEUE)
        try:
            reply = await REQUEST_SLOTS_CALL(inp, local=self.local)
        except ActivityError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(err)
            raise ApplicationError(message, type="SlotRequestFailed",
                                   non_retryable=True) from None
        return reply

    def held(self, resources: Resources,
             allocation_id: str) -> AbstractAsyncContextManager[None]:
        """A block after which the allocation is released, however it ends (`released_after`)."""
        return released_after(lambda: self.release(resources, allocation_id))

    async def release(self, resources: Resources, allocation_id: str) -> None:
        """Give the slots back (the pool ignores a repeated release): by signal, or when
        `local` through the `release_slots` local activity (the master's client signals)."""
        self._granted.pop(allocation_id, None)
        if self.local:
            await RELEASE_SLOTS_CALL(
                ReleaseSlotsInput(pool=resources.pool, allocation_id=allocation_id), local=True)
            return
        pool = workflow.get_external_workflow_handle(resource_pool_workflow_id(resources.pool))
        await pool.signal(PoolMessages.RELEASE, SlotRelease(allocation_id=allocation_id))


@asynccontextmanager
async def released_after(release: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Await `release` after the block, whether it returned or raised (a cancellation too: an
    eviction cancels the workflow's tasks), but not when the block's coroutine is closed: a
    workflow collected while suspended in the block is closed outside its event loop, where a
    workflow call cannot run (it raised there, reported as an unraisable exception)."""
    try:
        yield
    except GeneratorExit:
        raise
    except BaseException:
        await release()
        raise
    await release()

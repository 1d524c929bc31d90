"""What Temporal shows of a workflow: the status it ends in, what it ended as in Epochal, and
its state as `EpochalState`.

COMPLETED returns (Completed). ERROR raises a non-retryable ApplicationError whose message is
the reason (Failed; the failure converter drops the traceback of Epochal's own code). CANCELED
ends through Temporal's own cancellation (Canceled), which the SDK gives a workflow only after a
real cancel request: when none came (the user's cancel or kill reached it by signal), the
workflow asks the master's client for one on its own run and waits for it.

The other way round, a cancel request made outside Epochal (Temporal's UI, `temporal workflow
cancel`) must not interrupt a workflow wherever it awaits, which would leave its rows ACTIVE and
its slots held: `run_shielded` runs the body in its own task, and the body reads the request
(`cancel_requested`) and stops as the user's cancel does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.search_attributes import STATE
    from wire.workflow_io import CancelRequestInput
    from workflows.db_activities import REQUEST_CANCEL_CALL

T = TypeVar("T")


def cancel_requested() -> bool:
    """Temporal was asked to cancel this run (by anyone, this workflow included)."""
    return workflow.cancellation_reason() is not None


async def run_shielded(body: Coroutine[Any, Any, T]) -> T:
    """`body`'s result; a cancel request does not interrupt it (the body reads it with
    `cancel_requested`), and a body that ends canceled ends the run Canceled."""
    task = asyncio.ensure_future(body)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise  # the body ended canceled (`end_canceled`): the run ends Canceled
            # A cancel request cancelled this task, which the body outlives.


def end_failed(reason: str, kind: str) -> NoReturn:
    """End the run Failed with `reason` as its message (`kind`: ExperimentError, ...)."""
    raise ApplicationError(reason, type=kind, non_retryable=True) from None


async def end_canceled(reason: str) -> NoReturn:
    """End the run Canceled: through a cancel request on this run, made here unless one came."""
    if not cancel_requested():
        info = workflow.info()
        await REQUEST_CANCEL_CALL(
            CancelRequestInput(workflow_id=info.workflow_id, run_id=info.run_id, reason=reason),
            local=True)
        await workflow.wait_condition(cancel_requested)
    raise asyncio.CancelledError(reason)


class ShownState:
    """The workflow's state in its `EpochalState` search attribute, for a workflow started with
    it (where the namespace knows Epochal's attributes); written when it changes."""

    def __init__(self) -> None:
        self._state: str | None = None

    def start(self, state: str) -> None:
        """The state the workflow was started with."""
        if workflow.info().typed_search_attributes.get(STATE) is not None:
            self._state = state

    @property
    def state(self) -> str | None:
        return self._state

    def show(self, state: str) -> None:
        if self._state is not None and self._state != state:
            self._state = state
            workflow.upsert_search_attributes([STATE.value_set(state)])

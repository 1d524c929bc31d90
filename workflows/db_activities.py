"""How workflows call the master's activities (database writes, and messages through its client):
one place for their timeout, retries and whether they run locally.

They retry until PostgreSQL answers again, so a restart of the database pauses experiments
instead of failing them.

Since LOCAL_CALLS_PATCH they run as local activities: the master's worker runs them in the same
workflow task that asked, which records one marker event instead of three activity events and
a workflow task more (a trial's history went from 57 events to 37, and the Temporal server's
work per trial with it). A trial workflow is told by its input (`TrialInput.revision`) instead of
asking `workflow.patched` itself. A call with a longer timeout than a database round trip
(the experiment's end, which collects checkpoints) stays a regular activity, so that it never
holds a workflow task open.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy

T = TypeVar("T")

DB_ACTIVITY_TIMEOUT = timedelta(seconds=30)
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
LOCAL_CALLS_PATCH = "master-activities-run-locally"


async def db_activity(
    name: str,
    arg: Any,
    result_type: type[T] | None = None,
    *,
    timeout: timedelta = DB_ACTIVITY_TIMEOUT,
    retry_policy: RetryPolicy = DB_RETRY,
    local: bool | None = None,
    heartbeat: timedelta | None = None,
) -> T:
    """Run the master-side activity `name` (registered by deploy/master.build_worker); locally
    if `local`, or when None, if `workflow.patched(LOCAL_CALLS_PATCH)`. A regular one given
    `heartbeat` must heartbeat that often: a master that dies while it runs has it retried
    then, not after `timeout`."""
    if local is None:
        local = workflow.patched(LOCAL_CALLS_PATCH) if timeout <= DB_ACTIVITY_TIMEOUT else False
    if local:
        result: T = await workflow.execute_local_activity(
            name, arg, result_type=result_type, start_to_close_timeout=timeout,
            retry_policy=retry_policy)
        return result
    result = await workflow.execute_activity(
        name, arg, result_type=result_type, start_to_close_timeout=timeout,
        heartbeat_timeout=heartbeat, retry_policy=retry_policy)
    return result

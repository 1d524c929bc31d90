"""How workflows call the master's database activities: one place for their timeout and retries.

They retry until PostgreSQL answers again, so a restart of the database pauses experiments
instead of failing them.
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


async def db_activity(
    name: str,
    arg: Any,
    result_type: type[T] | None = None,
    *,
    timeout: timedelta = DB_ACTIVITY_TIMEOUT,
) -> T:
    """Run the master-side activity `name` (registered by activities.ExperimentStore)."""
    result: T = await workflow.execute_activity(
        name,
        arg,
        result_type=result_type,
        start_to_close_timeout=timeout,
        retry_policy=DB_RETRY,
    )
    return result

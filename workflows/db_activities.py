"""How workflows call the master's activities (database writes, and messages through its client):
each one once, typed (`MasterActivity`: its name, input and result types, timeout, retries and
whether it runs locally), so a call with the wrong input or a misread result fails mypy, not a
running workflow.

They retry until PostgreSQL answers again, so a restart of the database pauses experiments
instead of failing them.

Since LOCAL_CALLS_PATCH they run as local activities: the master's worker runs them in the same
workflow task that asked, which records one marker event instead of three activity events and
a workflow task more (a trial's history went from 57 events to 37, and the Temporal server's
work per trial with it). A trial workflow is told by its input (`TrialInput.revision`) instead of
asking `workflow.patched` itself. A call with a longer timeout than a database round trip
(the experiment's end, which collects checkpoints) stays a regular activity, so that it never
holds a workflow task open.

Names, timeouts and retry policies are in the histories (the commands a replay must match):
change none of them here without a patch marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from types import NoneType
from typing import Any, Generic, TypeVar, get_args

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from common import temporal_names as names
    from wire.pools import ReleaseSlotsInput, RequestSlotsInput, SlotReply
    from wire.workflow_io import (
        JSON,
        CancelRequestInput,
        CheckSearcherMetricInput,
        CreateTrialInput,
        FinishExperimentInput,
        RecordExperimentStateInput,
        RecordSearchInput,
        RecordTaskStateInput,
        RecordTrialStateInput,
        RequestPreemptionInput,
        ResumePoint,
        SampleHparamsInput,
        StartTrialInput,
        TrialClosedInput,
        TrialLogInput,
    )

A = TypeVar("A")  # an activity's input
R = TypeVar("R")  # its result
T = TypeVar("T")

DB_ACTIVITY_TIMEOUT = timedelta(seconds=30)
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
LOCAL_CALLS_PATCH = "master-activities-run-locally"
# The scheduler's activities (a pool's update, the release signal) retry sooner.
SCHEDULER_ACTIVITY_TIMEOUT = timedelta(seconds=30)
SCHEDULER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)
# The experiment's end (`finish_experiment`: its rows, then the checkpoints GC drops).
GC_TIMEOUT = timedelta(minutes=10)
# A sampler's draw fits a model of every trial so far (GP: seconds on hundreds of trials).
SAMPLE_TIMEOUT = timedelta(minutes=5)


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
    then, not after `timeout`. Workflows call it through a `MasterActivity`, which types it."""
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


@dataclass
class MasterActivity(Generic[A, R]):
    """One master activity as workflows call it, declared with its input and result types,
    `MasterActivity[In, Out](name)`: `await CALL(inp)` takes only an `In` and answers an `Out`
    (mypy checks both at every call; tests/unit/test_workflow_wire.py checks the declared types
    against the activity's own signature).

    A result type that is a class is the converter's `result_type` (the payload is read as
    that dataclass or number); any other (None, `str | None`) is read as plain JSON."""

    name: str
    timeout: timedelta = DB_ACTIVITY_TIMEOUT
    retry_policy: RetryPolicy = field(default_factory=lambda: DB_RETRY)

    @property
    def types(self) -> tuple[Any, Any]:
        """(input, result), as declared in `MasterActivity[In, Out]`."""
        declared = getattr(self, "__orig_class__", None)
        if declared is None:
            raise TypeError(f"{self.name}: declare it as MasterActivity[In, Out](name)")
        arg, result = get_args(declared)
        return arg, result

    async def __call__(self, arg: A, *, local: bool | None = None,
                       heartbeat: timedelta | None = None) -> R:
        """Run it; `local` as db_activity's (None: by LOCAL_CALLS_PATCH, or regular when its
        timeout is longer than a database round trip)."""
        result = self.types[1]
        result_type = result if isinstance(result, type) and result is not NoneType else None
        answer: R = await db_activity(self.name, arg, result_type, timeout=self.timeout,
                                      retry_policy=self.retry_policy, local=local,
                                      heartbeat=heartbeat)
        return answer


# activities/experiment_store.py: state writes (a trial's resume point, its searcher metric).
CREATE_TRIAL_CALL = MasterActivity[CreateTrialInput, int](names.CREATE_TRIAL)
RECORD_SEARCH_CALL = MasterActivity[RecordSearchInput, None](names.RECORD_SEARCH)
CHECK_SEARCHER_METRIC_CALL = MasterActivity[CheckSearcherMetricInput, str | None](
    names.CHECK_SEARCHER_METRIC)
WRITE_TRIAL_LOG_CALL = MasterActivity[TrialLogInput, None](names.WRITE_TRIAL_LOG)
RECORD_EXPERIMENT_STATE_CALL = MasterActivity[RecordExperimentStateInput, None](
    names.RECORD_EXPERIMENT_STATE)
RECORD_TRIAL_STATE_CALL = MasterActivity[RecordTrialStateInput, None](names.RECORD_TRIAL_STATE)
REQUEST_PREEMPTION_CALL = MasterActivity[RequestPreemptionInput, None](names.REQUEST_PREEMPTION)
GET_RESUME_POINT_CALL = MasterActivity[int, ResumePoint](names.GET_RESUME_POINT)
# The experiment's end collects its checkpoints: a regular activity, never a local one.
FINISH_EXPERIMENT_CALL = MasterActivity[FinishExperimentInput, int | None](
    names.FINISH_EXPERIMENT, timeout=GC_TIMEOUT)
# activities/model_sampling.py
SAMPLE_TRIAL_HPARAMS_CALL = MasterActivity[SampleHparamsInput, JSON](
    names.SAMPLE_TRIAL_HPARAMS, timeout=SAMPLE_TIMEOUT)
# activities/scheduler.py: a pool's update, and its release signal.
REQUEST_SLOTS_CALL = MasterActivity[RequestSlotsInput, SlotReply](
    names.REQUEST_SLOTS_ACTIVITY, SCHEDULER_ACTIVITY_TIMEOUT, SCHEDULER_RETRY)
RELEASE_SLOTS_CALL = MasterActivity[ReleaseSlotsInput, bool](
    names.RELEASE_SLOTS_ACTIVITY, SCHEDULER_ACTIVITY_TIMEOUT, SCHEDULER_RETRY)
# activities/workflow_messages.py: messages through the master's client.
START_TRIAL_CALL = MasterActivity[StartTrialInput, None](names.START_TRIAL)
REPORT_TRIAL_CLOSED_CALL = MasterActivity[TrialClosedInput, bool](names.REPORT_TRIAL_CLOSED)
REQUEST_CANCEL_CALL = MasterActivity[CancelRequestInput, None](names.REQUEST_CANCEL)
# activities/task_store.py
RECORD_TASK_STATE_CALL = MasterActivity[RecordTaskStateInput, None](names.RECORD_TASK_STATE)
TASK_IDLE_SECONDS_CALL = MasterActivity[str, float](names.TASK_IDLE_SECONDS)

MASTER_ACTIVITIES: tuple[MasterActivity[Any, Any], ...] = (
    CREATE_TRIAL_CALL, RECORD_SEARCH_CALL, CHECK_SEARCHER_METRIC_CALL, WRITE_TRIAL_LOG_CALL,
    RECORD_EXPERIMENT_STATE_CALL, RECORD_TRIAL_STATE_CALL, REQUEST_PREEMPTION_CALL,
    GET_RESUME_POINT_CALL, FINISH_EXPERIMENT_CALL, SAMPLE_TRIAL_HPARAMS_CALL, REQUEST_SLOTS_CALL,
    RELEASE_SLOTS_CALL, START_TRIAL_CALL, REPORT_TRIAL_CLOSED_CALL, REQUEST_CANCEL_CALL,
    RECORD_TASK_STATE_CALL, TASK_IDLE_SECONDS_CALL,
)

"""TrialWorkflow: runs one trial on an agent until it completes, restarting it after failures.

Each run is one `run_trial` activity on the resource pool's task queue; an agent's heartbeat keeps
it alive. Pause and cancel ask the training code to checkpoint and stop (preemption, read by the
harness through the API); kill cancels the activity at once, which kills the process group.
A failed run restarts from the latest checkpoint with exponential backoff, up to `max_restarts`.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.constants import pool_task_queue
    from workflows.types import (
        RecordTrialStateInput,
        RequestPreemptionInput,
        ResumePoint,
        RunTrialInput,
        RunTrialResult,
        TrialInput,
        TrialOutcome,
    )

DB_ACTIVITY_TIMEOUT = timedelta(seconds=30)
# Database activities retry until PostgreSQL is back: a restart of it must not fail a trial.
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
RUN_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
RUN_MAX_DURATION = timedelta(days=30)
PREEMPTION_GRACE = timedelta(minutes=5)
MAX_BACKOFF_SECONDS = 60


def restart_backoff(restarts: int) -> timedelta:
    """1 s, 2 s, 4 s, ... capped at a minute."""
    return timedelta(seconds=min(2 ** max(restarts - 1, 0), MAX_BACKOFF_SECONDS))


@workflow.defn(name="TrialWorkflow")
class TrialWorkflow:
    def __init__(self) -> None:
        self._paused = False
        self._cancel = False
        self._kill = False
        self._state = "QUEUED"
        self._restarts = 0
        self._run_id = 0
        self._agent_id: str | None = None

    @workflow.run
    async def run(self, inp: TrialInput) -> TrialOutcome:
        self._paused = inp.start_paused
        max_restarts = int(inp.config.get("max_restarts", 5))
        while True:
            if self._cancel or self._kill:
                return await self._end(inp, "CANCELED")
            if self._paused:
                await self._record(inp, "PAUSED")
                await workflow.wait_condition(lambda: not self._paused or self._stopping())
                continue

            resume: ResumePoint = await workflow.execute_activity(
                "get_resume_point",
                inp.trial_id,
                result_type=ResumePoint,
                start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
                retry_policy=DB_RETRY,
            )
            self._run_id += 1
            await self._record(inp, "RUNNING", run_id=self._run_id)
            ended, result = await self._run_once(inp, resume)

            if self._kill or (self._cancel and ended != "failed"):
                return await self._end(inp, "CANCELED")
            if ended == "preempted":
                continue  # paused: the loop waits for activate
            if ended == "completed":
                final = await workflow.execute_activity(
                    "get_resume_point",
                    inp.trial_id,
                    result_type=ResumePoint,
                    start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
                    retry_policy=DB_RETRY,
                )
                return await self._end(inp, "COMPLETED", final.early_exit_reason)

            self._restarts += 1
            workflow.logger.warning(
                "trial %s run %s failed (%s); restart %s of %s",
                inp.trial_id,
                self._run_id,
                result,
                self._restarts,
                max_restarts,
            )
            if self._restarts > max_restarts:
                return await self._end(inp, "ERROR")
            await self._record(inp, "QUEUED")
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    self._stopping, timeout=restart_backoff(self._restarts)
                )

    async def _run_once(self, inp: TrialInput, resume: ResumePoint) -> tuple[str, str]:
        """One run on an agent: ('completed'|'preempted'|'failed', detail)."""
        handle = workflow.start_activity(
            "run_trial",
            RunTrialInput(
                experiment_id=inp.experiment_id,
                trial_id=inp.trial_id,
                run_id=self._run_id,
                hparams=inp.hparams,
                config=inp.config,
                trial_seed=inp.trial_seed,
                latest_checkpoint=resume.latest_checkpoint,
                steps_completed=resume.steps_completed,
            ),
            result_type=RunTrialResult,
            task_queue=pool_task_queue(inp.config["resources"]["resource_pool"]),
            start_to_close_timeout=RUN_MAX_DURATION,
            heartbeat_timeout=RUN_HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        preempted = False
        await workflow.wait_condition(lambda: handle.done() or self._kill or self._wants_preempt())
        if not handle.done() and self._kill:
            handle.cancel()
        elif not handle.done():
            preempted = True
            await self._preempt(inp, True)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: handle.done() or self._kill, timeout=PREEMPTION_GRACE
                )
            if not handle.done():
                handle.cancel()
        try:
            result = await handle
        except ActivityError as err:
            return ("preempted" if preempted or self._kill else "failed", str(err.cause or err))
        self._agent_id = result.agent_id
        if result.exit_code == 0:
            return ("preempted" if preempted else "completed", "exit 0")
        detail = result.message or f"exit code {result.exit_code}"
        return ("preempted" if preempted and self._stopping_or_paused() else "failed", detail)

    def _wants_preempt(self) -> bool:
        return self._paused or self._cancel

    def _stopping(self) -> bool:
        return self._cancel or self._kill

    def _stopping_or_paused(self) -> bool:
        return self._stopping() or self._paused

    async def _preempt(self, inp: TrialInput, preempt: bool) -> None:
        await workflow.execute_activity(
            "request_preemption",
            RequestPreemptionInput(trial_id=inp.trial_id, preempt=preempt),
            start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
            retry_policy=DB_RETRY,
        )

    async def _record(
        self, inp: TrialInput, state: str, *, run_id: int | None = None, ended: bool = False
    ) -> None:
        self._state = state
        await workflow.execute_activity(
            "record_trial_state",
            RecordTrialStateInput(
                trial_id=inp.trial_id,
                state=state,
                restarts=self._restarts,
                run_id=run_id,
                ended=ended,
                agent_id=self._agent_id,
            ),
            start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
            retry_policy=DB_RETRY,
        )

    async def _end(
        self, inp: TrialInput, state: str, early_exit_reason: str | None = None
    ) -> TrialOutcome:
        await self._record(inp, state, ended=True)
        return TrialOutcome(
            trial_id=inp.trial_id,
            state=state,
            restarts=self._restarts,
            early_exit_reason=early_exit_reason,
        )

    @workflow.signal
    def pause(self) -> None:
        self._paused = True

    @workflow.signal
    def activate(self) -> None:
        self._paused = False

    @workflow.signal
    def cancel(self) -> None:
        self._cancel = True

    @workflow.signal
    def kill(self) -> None:
        self._kill = True

    @workflow.query
    def describe(self) -> dict[str, object]:
        return {
            "state": self._state,
            "restarts": self._restarts,
            "run_id": self._run_id,
            "paused": self._paused,
        }

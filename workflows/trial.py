"""TrialWorkflow: runs one trial on an agent until it completes, restarting it after failures.

Before each run the trial asks its resource pool's scheduler for slots (workflows/allocation.py)
and runs one `run_trial` activity on the granted agent's own task queue `agent.<id>`; the agent's
heartbeat keeps it alive, and the slots go back to the pool after the run. Pause and cancel ask
the training code to checkpoint and stop (preemption, read by the harness through the API); kill
cancels the activity at once, which kills the process group.
A failed run restarts from the latest checkpoint with exponential backoff, up to `max_restarts`.

A run granted several agents (`resources.slots_per_trial` larger than one agent) runs one
`run_trial` activity per agent, each told the rendezvous (every agent's address, its rank, free
ports on the chief, which the chief's `reserve_ports` activity finds). The run is one: when any
part fails, ends or is lost, the others are cancelled, and the trial restarts all of them.

The searcher steers a trial too: `stop_early` ends it like a cancel but as COMPLETED, and with
classic ASHA each run trains only to the trial's current rung (`target`), after which the trial
waits, holding no slots, until `continue_to` promotes it. At its end the trial tells its
experiment by signal (sent through the master's client: see LOCAL_CALLS_REVISION), and from
TEMPORAL_STATUS_REVISION on it ends in Temporal's status that matches its state
(workflows/temporal_status.py) and keeps its `EpochalState` search attribute current.

It runs outside Temporal's sandbox (`sandboxed=False`): there is one per trial, and building a
sandbox for each (a fresh load of this module and its imports) was a sixth of the master's CPU
in a search of many short trials. Its determinism is kept as the sandbox would: no IO, clock or
randomness here (activities do those), and the replay tests over recorded histories.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from common.expconf import SearcherConfig, stored_config
    from common.states import EndState, TrialState
    from common.temporal_names import (
        RESERVE_PORTS,
        RUN_TRIAL,
        TRIAL_WORKFLOW,
        ExperimentMessages,
        TrialMessages,
        allocation_id,
        experiment_workflow_id,
        task_id,
    )
    from wire.pools import (
        Allocation,
        AllocationPart,
        PoolMove,
        Preemption,
        SlotFailure,
        SlotRequest,
        SlotWaiting,
        allocation_parts,
    )
    from wire.run_spec import RunSpec
    from wire.workflow_io import (
        LOCAL_CALLS_REVISION,
        RENDEZVOUS_PORTS,
        RUN_SPEC_REVISION,
        TEMPORAL_STATUS_REVISION,
        CheckSearcherMetricInput,
        RecordTrialStateInput,
        Rendezvous,
        RequestPreemptionInput,
        ResumePoint,
        RunTrialInput,
        RunTrialResult,
        TrialClosedInput,
        TrialInput,
        TrialLogInput,
        TrialOutcome,
    )
    from workflows.allocation import Allocator, Resources
    from workflows.db_activities import (
        CHECK_SEARCHER_METRIC_CALL,
        GET_RESUME_POINT_CALL,
        RECORD_TRIAL_STATE_CALL,
        REPORT_TRIAL_CLOSED_CALL,
        REQUEST_PREEMPTION_CALL,
        WRITE_TRIAL_LOG_CALL,
        MasterActivity,
    )
    from workflows.temporal_status import (
        ShownState,
        cancel_requested,
        end_canceled,
        end_failed,
        run_shielded,
    )

A = TypeVar("A")
R = TypeVar("R")

RUN_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
RUN_MAX_DURATION = timedelta(days=30)
PREEMPTION_GRACE = timedelta(minutes=5)
MAX_BACKOFF_SECONDS = 60
RUN_PICKUP_TIMEOUT = timedelta(seconds=60)  # the granted agent must start the run by then
# How long a run on several agents waits for its other parts to confirm they stopped (a live
# agent does within its kill grace, 10 s by default); a lost agent's part never confirms, and
# waiting for its heartbeat timeout would only delay the restart.
PARTS_STOP_WAIT = timedelta(seconds=15)
ACROSS_AGENTS_PATCH = "trial-runs-across-agents"
# Issue 36: each run_trial carries the run's RunSpec (wire/run_spec.py), built here once per
# trial; runs of histories before it carry only the config, and the agent builds the same spec.
# A trial of RUN_SPEC_REVISION carries it without asking (its experiment asked); one of an
# earlier revision, started before the upgrade, asks this marker.
RUN_SPEC_PATCH = "trial-runs-carry-a-run-spec"
# Issue 38: the pool preempts a run for higher-priority work (signal `preempt`): the trial asks
# its code to checkpoint and stop, gives the slots back and queues again, killing the run past
# the pool's grace. Only a preempted trial writes the marker.
SCHEDULER_PREEMPTION_PATCH = "trial-preempted-by-its-pool"
# Issue 38: its experiment moves to another pool (signal `move_to_pool`): a request waiting in
# the old pool is withdrawn and made in the new one; a run holding slots keeps them, and the
# trial's next run asks the new pool. Only a moved trial writes the marker.
POOL_MOVE_PATCH = "trial-moves-to-another-pool"
# Issue 38: a run on several agents records all of them as it starts (the allocation history's
# agents; before, only the chief). Only such a run writes the marker.
RUN_AGENTS_PATCH = "trial-records-every-agent-of-a-run"


def restart_backoff(restarts: int) -> timedelta:
    """1 s, 2 s, 4 s, ... capped at a minute."""
    return timedelta(seconds=min(2 ** max(restarts - 1, 0), MAX_BACKOFF_SECONDS))


@workflow.defn(name=TRIAL_WORKFLOW, sandboxed=False)
class TrialWorkflow:
    def __init__(self) -> None:
        self._paused = False
        self._cancel_signaled = False
        self._takes_cancel_requests = False  # TEMPORAL_STATUS_REVISION
        self._shown = ShownState()
        self._kill = False
        self._stop_early = False  # the searcher stopped this trial (ASHA)
        self._state = TrialState.QUEUED
        self._restarts = 0
        self._run_id = 0
        self._agent_id: str | None = None
        self._allocator = Allocator()
        self._target: int | None = None  # the length this run trains to
        self._inp: TrialInput | None = None
        self._resources: Resources  # from the config, set by `run`
        self._searcher: SearcherConfig
        self._spec: dict[str, Any] | None = None  # RUN_SPEC_PATCH: the runs' RunSpec, as JSON
        self._allocation_id = ""  # the current run's
        self._preempted_by: Preemption | None = None  # the pool wants the current run's slots
        self._moved_to: str | None = None  # POOL_MOVE_PATCH: the pool the next request goes to
        self._agent_ids: list[str] = []  # the current run's agents, the chief first

    @workflow.run
    async def run(self, inp: TrialInput) -> TrialOutcome:
        if inp.revision >= TEMPORAL_STATUS_REVISION:
            self._takes_cancel_requests = True
            self._shown.start(TrialState.QUEUED)
            return await run_shielded(self._run(inp))
        return await self._run(inp)

    @property
    def _heartbeat_timeout(self) -> timedelta:
        """Its runs' heartbeat timeout: the master's agent timeout when its experiment passed
        one (a value from the input, the same on replay), else RUN_HEARTBEAT_TIMEOUT."""
        seconds = self._inp.agent_timeout_seconds if self._inp is not None else None
        return timedelta(seconds=seconds) if seconds else RUN_HEARTBEAT_TIMEOUT

    @property
    def _cancel(self) -> bool:
        """The user's cancel, by signal from the experiment or as a cancel request."""
        return self._cancel_signaled or (self._takes_cancel_requests and cancel_requested())

    async def _run(self, inp: TrialInput) -> TrialOutcome:
        self._inp = inp
        self._allocator.local = inp.revision >= LOCAL_CALLS_REVISION
        self._paused = inp.start_paused
        self._target = inp.target
        config = stored_config(inp.config)  # the API validated it: read through the model
        self._resources = Resources.of(config.resources)
        self._searcher = config.searcher
        max_restarts = config.max_restarts
        while True:
            if self._cancel or self._kill:
                return await self._end(inp, EndState.CANCELED)
            if self._stop_early:
                return await self._end(inp, EndState.COMPLETED, stopped_early=True)
            if self._paused:
                await self._record(inp, TrialState.PAUSED)
                await workflow.wait_condition(lambda: not self._paused or self._stopping())
                continue

            if self._moving():
                await self._move_to_pool(inp)
            resume = await self._db(GET_RESUME_POINT_CALL, inp.trial_id)
            self._run_id += 1
            try:
                allocation = await self._allocate(inp)
            except ApplicationError as err:  # can never be granted: more slots than any agent has
                return await self._end(
                    inp, EndState.ERROR, error=f"cannot schedule the trial: {err.message}")
            if allocation is None:
                continue  # paused, stopped or moved to another pool while waiting for slots
            self._agent_id = allocation.agent_id
            self._agent_ids = [part.agent_id for part in allocation_parts(allocation)]
            self._allocation_id = allocation.allocation_id
            await self._record(inp, TrialState.RUNNING, run_id=self._run_id)
            run_target = self._target  # a promotion may raise the target while the run ends
            async with self._allocator.held(self._resources, allocation.allocation_id):
                ended, result = await self._run_once(inp, resume, allocation)

            if self._kill or (self._cancel and ended != "failed"):
                return await self._end(inp, EndState.CANCELED)
            if ended == "preempted" and self._pool_preempted():
                await self._requeue_after_preemption(inp)
                continue
            self._preempted_by = None
            if ended == "preempted":
                continue  # paused or stopped early: the loop decides
            if ended == "fatal":  # restarting cannot help (the agent said so)
                return await self._end(inp, EndState.ERROR,
                                       error=f"run {self._run_id} failed: {result}")
            if (
                ended == "completed"
                and inp.waits_at_target
                and not self._stop_early
                and (run_target or 0) < self._searcher.total_length
            ):
                # Classic ASHA: at its rung the trial waits (holding no slots) until the
                # searcher promotes it to a longer target or stops it.
                reached = run_target or 0
                error = await self._searcher_metric_error(inp, reached)
                if error is not None:
                    return await self._end(inp, EndState.ERROR, error=error)
                await self._record(inp, TrialState.PAUSED)
                await workflow.wait_condition(partial(self._promoted_past, reached))
                continue
            if ended == "completed":
                final = await self._db(GET_RESUME_POINT_CALL, inp.trial_id)
                search_status = None
                if final.early_exit_reason is None and not self._stop_early:
                    error = await self._searcher_metric_error(inp, 0)
                    if error is not None and not workflow.patched(
                        "trial-completes-without-searcher-metric"
                    ):
                        return await self._end(inp, EndState.ERROR, error=error)
                    if error is not None:
                        # As Determined: the training code decides what it reports; the trial
                        # just cannot be ranked (0_start and batch inference report none).
                        await self._log(inp, f"[epochal] {error}", level="WARNING")
                        search_status = (
                            "completed without reporting the searcher metric "
                            f'"{self._searcher.metric}"'
                        )
                return await self._end(
                    inp,
                    EndState.COMPLETED,
                    final.early_exit_reason,
                    stopped_early=self._stop_early,
                    search_status=search_status,
                )

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
                return await self._end(
                    inp,
                    EndState.ERROR,
                    error=f"run {self._run_id} failed: {result}; "
                    f"max_restarts ({max_restarts}) spent",
                )
            point = await self._db(GET_RESUME_POINT_CALL, inp.trial_id)
            await self._log(
                inp,
                f"[epochal] run {self._run_id} failed: {result}; restarting from checkpoint "
                f"{point.latest_checkpoint or '(none: from the start)'} in "
                f"{restart_backoff(self._restarts).total_seconds():g} s "
                f"(restart {self._restarts} of {max_restarts})",
                level="WARNING",
            )
            await self._record(inp, TrialState.QUEUED)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    self._stopping, timeout=restart_backoff(self._restarts)
                )

    async def _allocate(self, inp: TrialInput) -> Allocation | None:
        """Slots for this run from the pool; None when paused or stopped while waiting."""
        resources = self._resources
        request = SlotRequest(
            allocation_id=allocation_id(inp.experiment_id, inp.trial_id, self._run_id),
            workflow_id=workflow.info().workflow_id,
            experiment_id=inp.experiment_id,
            trial_id=inp.trial_id,
            slots=resources.slots,
            priority=resources.priority,
            max_slots=resources.max_slots,
        )
        allocation = await self._allocator.acquire(
            resources, request, lambda: self._stopping_or_paused() or self._moving())
        if allocation is not None and self._stopping_or_paused():
            await self._allocator.release(resources, allocation.allocation_id)
            return None
        return allocation

    def _run_input(self, inp: TrialInput, resume: ResumePoint, slot_ids: list[int],
                   rendezvous: Rendezvous | None = None) -> RunTrialInput:
        return RunTrialInput(
            experiment_id=inp.experiment_id,
            trial_id=inp.trial_id,
            run_id=self._run_id,
            hparams=inp.hparams,
            config=inp.config,
            trial_seed=inp.trial_seed,
            latest_checkpoint=resume.latest_checkpoint,
            steps_completed=resume.steps_completed,
            slot_ids=slot_ids,
            max_length=({inp.length_unit: self._target} if self._target is not None else None),
            rendezvous=rendezvous,
            spec=self._run_spec(inp),
        )

    def _run_spec(self, inp: TrialInput) -> dict[str, Any] | None:
        """What the agent runs (RunSpec, as JSON), the same for every run of the trial."""
        if inp.revision < RUN_SPEC_REVISION and not workflow.patched(RUN_SPEC_PATCH):
            return None
        if self._spec is None:
            self._spec = RunSpec.of(stored_config(inp.config), inp.config).model_dump(mode="json")
        return self._spec

    def _start_run(self, task_queue: str, run: RunTrialInput) -> workflow.ActivityHandle[Any]:
        return workflow.start_activity(
            RUN_TRIAL,
            run,
            result_type=RunTrialResult,
            task_queue=task_queue,
            schedule_to_start_timeout=RUN_PICKUP_TIMEOUT,
            start_to_close_timeout=RUN_MAX_DURATION,
            heartbeat_timeout=self._heartbeat_timeout,
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )

    async def _run_once(
        self, inp: TrialInput, resume: ResumePoint, allocation: Allocation
    ) -> tuple[str, str]:
        """One run on the allocated agent: ('completed'|'preempted'|'failed'|'fatal', detail)."""
        parts = allocation_parts(allocation)
        if len(parts) > 1 and workflow.patched(ACROSS_AGENTS_PATCH):
            return await self._run_across(inp, resume, parts)
        handle = self._start_run(allocation.task_queue,
                                 self._run_input(inp, resume, allocation.slot_ids))
        preempted = False
        await workflow.wait_condition(lambda: handle.done() or self._kill or self._wants_preempt())
        if not handle.done() and self._kill:
            handle.cancel()
        elif not handle.done():
            preempted = True
            await self._preempt(inp, True)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: handle.done() or self._kill, timeout=self._preemption_grace()
                )
            if not handle.done():
                await self._log_killed_after_grace(inp)
                handle.cancel()
        try:
            result = await handle
        except ActivityError as err:
            if preempted or self._kill:
                return ("preempted", _run_failure(err, self._heartbeat_timeout))
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.non_retryable:
                # e.g. an image that cannot be pulled
                return ("fatal", _run_failure(err, self._heartbeat_timeout))
            return ("failed", _run_failure(err, self._heartbeat_timeout))
        self._agent_id = result.agent_id
        if result.exit_code == 0:
            return ("preempted" if preempted else "completed", "exit 0")
        detail = result.message or f"exit code {result.exit_code}"
        return ("preempted" if preempted and (self._stopping_or_paused()
                                              or self._pool_preempted())
                else "failed", detail)

    async def _run_across(
        self, inp: TrialInput, resume: ResumePoint, parts: list[AllocationPart]
    ) -> tuple[str, str]:
        """One run on several agents, a part on each: it succeeds when every part exits 0 and
        fails when any part fails, which cancels the others (their processes are killed)."""
        try:
            ports: list[int] = await workflow.execute_activity(
                RESERVE_PORTS,
                RENDEZVOUS_PORTS,
                result_type=list[int],
                task_queue=parts[0].task_queue,
                schedule_to_start_timeout=RUN_PICKUP_TIMEOUT,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=2),
            )
        except ActivityError as err:
            why = _run_failure(err, self._heartbeat_timeout)
            return ("failed", f"the chief agent {parts[0].agent_id}: {why}")
        addrs = [part.address or "127.0.0.1" for part in parts]
        counts = [len(part.slot_ids) for part in parts]
        handles = [
            self._start_run(part.task_queue, self._run_input(
                inp, resume, part.slot_ids,
                Rendezvous(container_addrs=addrs, container_rank=rank,
                           container_slot_counts=counts, ports=ports)))
            for rank, part in enumerate(parts)
        ]

        def failed_part() -> int | None:
            """The first part (by rank) that ended without success."""
            for rank, handle in enumerate(handles):
                if handle.done() and _part_failure(handle, self._heartbeat_timeout) is not None:
                    return rank
            return None

        def all_done() -> bool:
            return all(h.done() for h in handles)

        preempted = False
        await workflow.wait_condition(
            lambda: all_done() or failed_part() is not None or self._kill
            or self._wants_preempt())
        if (not all_done() and self._wants_preempt() and not self._kill
                and failed_part() is None):
            preempted = True
            await self._preempt(inp, True)
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: all_done() or self._kill or failed_part() is not None,
                    timeout=self._preemption_grace())
            if not all_done() and failed_part() is None and not self._kill:
                await self._log_killed_after_grace(inp)
        first = failed_part()  # the cause, before the others are cancelled
        for handle in handles:
            if not handle.done():
                handle.cancel()
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(all_done, timeout=PARTS_STOP_WAIT)
        if self._kill or (preempted and (self._stopping_or_paused()
                                         or self._pool_preempted())):
            return ("preempted", "stopped on every agent")
        first = first if first is not None else failed_part()
        if first is None:
            return ("preempted" if preempted else "completed", "exit 0 on every agent")
        handle = handles[first]
        error = None if handle.cancelled() else handle.exception()
        cause = error.cause if isinstance(error, ActivityError) else None
        fatal = isinstance(cause, ApplicationError) and cause.non_retryable
        detail = (f"agent {parts[first].agent_id} (node rank {first}): "
                  f"{_part_failure(handle, self._heartbeat_timeout)}")
        return ("fatal" if fatal else "failed", detail)

    def _promoted_past(self, reached: int) -> bool:
        return (self._target or 0) > reached or self._stopping()

    def _wants_preempt(self) -> bool:
        return self._paused or self._cancel or self._stop_early or self._preempted_by is not None

    def _pool_preempted(self) -> bool:
        """The pool, not the user or the searcher, wants the run to stop."""
        return self._preempted_by is not None and not self._stopping_or_paused()

    def _preemption_grace(self) -> timedelta:
        """How long a preempted run has to checkpoint and stop before it is killed: the
        pool's grace when the pool preempts it, else PREEMPTION_GRACE."""
        if self._preempted_by is not None and self._pool_preempted():
            return timedelta(seconds=self._preempted_by.grace_seconds)
        return PREEMPTION_GRACE

    async def _log_killed_after_grace(self, inp: TrialInput) -> None:
        if self._preempted_by is not None and self._pool_preempted():
            await self._log(inp, f"[epochal] run {self._run_id} did not stop within "
                            f"{self._preempted_by.grace_seconds:g} s of its preemption: "
                            "killed", level="WARNING")

    async def _requeue_after_preemption(self, inp: TrialInput) -> None:
        """The run gave its slots back to higher-priority work: queue again, to resume from
        the latest checkpoint (the next loop asks for slots with a new run id)."""
        self._preempted_by = None
        point = await self._db(GET_RESUME_POINT_CALL, inp.trial_id)
        await self._log(inp, f"[epochal] run {self._run_id} gave its slots back; queued again, "
                        "to resume from checkpoint "
                        f"{point.latest_checkpoint or '(none: from the start)'}")
        await self._record(inp, TrialState.QUEUED)

    def _stopping(self) -> bool:
        return self._cancel or self._kill or self._stop_early

    def _moving(self) -> bool:
        """Its experiment moved it to another pool, which it has not asked yet."""
        return self._moved_to is not None and self._moved_to != self._resources.pool

    async def _move_to_pool(self, inp: TrialInput) -> None:
        """Ask the pool the experiment moved to from this run on (the old pool has no request
        of this trial left: the last one was released or withdrawn)."""
        assert self._moved_to is not None
        old, self._resources = self._resources.pool, replace(self._resources, pool=self._moved_to)
        await self._log(inp, f"[epochal] moved from resource pool {old!r} to "
                        f"{self._moved_to!r}: the trial's slots are asked of {self._moved_to!r}")

    def _stopping_or_paused(self) -> bool:
        return self._stopping() or self._paused

    async def _searcher_metric_error(self, inp: TrialInput, min_length: int) -> str | None:
        """Why the trial's validations cannot serve the searcher, if they cannot."""
        return await self._db(
            CHECK_SEARCHER_METRIC_CALL,
            CheckSearcherMetricInput(
                trial_id=inp.trial_id,
                metric=self._searcher.metric,
                min_length=min_length,
                time_metric=getattr(self._searcher, "time_metric", None),  # ASHA's only
            ),
        )

    async def _preempt(self, inp: TrialInput, preempt: bool) -> None:
        await self._db(
            REQUEST_PREEMPTION_CALL, RequestPreemptionInput(trial_id=inp.trial_id, preempt=preempt)
        )

    async def _log(self, inp: TrialInput, line: str, *, level: str = "INFO") -> None:
        """A line from the master in the trial's logs (errors and restarts it decided)."""
        await self._db(
            WRITE_TRIAL_LOG_CALL,
            TrialLogInput(
                trial_id=inp.trial_id,
                task_id=task_id(inp.experiment_id, inp.trial_id),
                allocation_id=allocation_id(inp.experiment_id, inp.trial_id, self._run_id),
                log=line,
                level=level,
                agent_id=self._agent_id,
            ),
        )

    async def _record(
        self,
        inp: TrialInput,
        state: TrialState,
        *,
        run_id: int | None = None,
        ended: bool = False,
        search_status: str | None = None,
    ) -> None:
        self._state = state
        await self._db(
            RECORD_TRIAL_STATE_CALL,
            RecordTrialStateInput(
                trial_id=inp.trial_id,
                state=state,
                restarts=self._restarts,
                run_id=run_id,
                ended=ended,
                agent_id=self._agent_id,
                search_status=search_status,
                agent_ids=(self._agent_ids if state == TrialState.RUNNING and run_id is not None
                           and len(self._agent_ids) > 1 and workflow.patched(RUN_AGENTS_PATCH)
                           else None),
            ),
        )
        self._shown.show(state)

    async def _end(
        self,
        inp: TrialInput,
        state: EndState,
        early_exit_reason: str | None = None,
        *,
        stopped_early: bool = False,
        error: str | None = None,
        search_status: str | None = None,
    ) -> TrialOutcome:
        if error is not None:
            await self._log(inp, f"[epochal] {error}", level="ERROR")
        await self._record(inp, TrialState(state), ended=True, search_status=search_status)
        outcome = TrialOutcome(
            trial_id=inp.trial_id,
            state=state,
            restarts=self._restarts,
            early_exit_reason=early_exit_reason,
            stopped_early=stopped_early,
            error=error,
        )
        # The experiment learns of the end by signal: it may have continued-as-new since it
        # started this trial, so it does not wait on the child's result.
        if inp.revision >= LOCAL_CALLS_REVISION:  # sent by the master's client (a local activity)
            await self._db(REPORT_TRIAL_CLOSED_CALL,
                           TrialClosedInput(experiment_id=inp.experiment_id, outcome=outcome))
            if inp.revision >= TEMPORAL_STATUS_REVISION and state == EndState.ERROR:
                end_failed(f"trial {inp.trial_id} ended in ERROR: {error or 'no reason given'}",
                           "TrialError")
            if inp.revision >= TEMPORAL_STATUS_REVISION and state == EndState.CANCELED:
                await end_canceled("killed" if self._kill else "canceled")
            return outcome
        parent = workflow.get_external_workflow_handle(experiment_workflow_id(inp.experiment_id))
        try:
            await parent.signal(ExperimentMessages.TRIAL_CLOSED, outcome)
        except Exception as err:  # the experiment has ended (killed, say): nobody to tell
            workflow.logger.info("experiment did not take trial_closed: %s", err)
        return outcome

    async def _db(self, call: MasterActivity[A, R], arg: A) -> R:
        """A master activity for this trial: local from LOCAL_CALLS_REVISION on."""
        assert self._inp is not None
        return await call(arg, local=self._inp.revision >= LOCAL_CALLS_REVISION)

    @workflow.signal(name=TrialMessages.STOP_EARLY)
    def stop_early(self) -> None:
        """The searcher stops this trial: checkpoint and stop; it ends COMPLETED."""
        self._stop_early = True

    @workflow.signal(name=TrialMessages.PREEMPT)
    async def preempt(self, preemption: Preemption) -> None:
        """The pool needs the current run's slots for higher-priority work (a request for an
        earlier run, or one that arrives as the run ends, changes nothing)."""
        if (preemption.allocation_id != self._allocation_id or self._preempted_by is not None
                or self._inp is None or not workflow.patched(SCHEDULER_PREEMPTION_PATCH)):
            return
        self._preempted_by = preemption
        await self._log(self._inp, f"[epochal] preempted: {preemption.reason}; the run is asked "
                        f"to checkpoint and stop within {preemption.grace_seconds:g} s",
                        level="WARNING")

    @workflow.signal(name=TrialMessages.MOVE_TO_POOL)
    def move_to_pool(self, move: PoolMove) -> None:
        """The experiment moved to another pool (`det job update --resource-pool`): a waiting
        request moves now, a running run's slots are kept until it ends."""
        if workflow.patched(POOL_MOVE_PATCH):
            self._moved_to = move.pool

    @workflow.signal(name=TrialMessages.CONTINUE_TO)
    def continue_to(self, target: int) -> None:
        """The searcher promotes this trial: train on (from the checkpoint) to `target`."""
        self._target = max(self._target or 0, target)

    @workflow.signal(name=TrialMessages.SLOTS_GRANTED)
    def slots_granted(self, allocation: Allocation) -> None:
        """The resource pool granted the run's slots."""
        self._allocator.granted(allocation)

    @workflow.signal(name=TrialMessages.SLOTS_FAILED)
    def slots_failed(self, failure: SlotFailure) -> None:
        """The resource pool can never grant the request (too big for any agent)."""
        self._allocator.failed(failure)

    @workflow.signal(name=TrialMessages.SLOTS_WAITING)
    async def slots_waiting(self, waiting: SlotWaiting) -> None:
        """The pool says the run's request is larger than the pool is now: say so in the logs."""
        if self._inp is not None:
            await self._log(self._inp, f"[epochal] {waiting.message}", level="WARNING")

    @workflow.signal(name=TrialMessages.PAUSE)
    def pause(self) -> None:
        self._paused = True

    @workflow.signal(name=TrialMessages.ACTIVATE)
    def activate(self) -> None:
        self._paused = False

    @workflow.signal(name=TrialMessages.CANCEL)
    def cancel(self) -> None:
        self._cancel_signaled = True

    @workflow.signal(name=TrialMessages.KILL)
    def kill(self) -> None:
        self._kill = True

    @workflow.query(name=TrialMessages.DESCRIBE)
    def describe(self) -> dict[str, object]:
        return {
            "state": self._state,
            "restarts": self._restarts,
            "run_id": self._run_id,
            "paused": self._paused,
            "target": self._target,
            "stopped_early": self._stop_early,
            # where its next request goes (a running run's slots may be another pool's)
            "resource_pool": self._moved_to or (self._resources.pool if self._inp else None),
        }


def _part_failure(handle: workflow.ActivityHandle[Any], heartbeat: timedelta) -> str | None:
    """Why a finished part of a run on several agents failed; None if it exited 0."""
    if handle.cancelled():
        return "cancelled"
    err = handle.exception()  # (also marks it retrieved: a failed part is no stray error)
    if isinstance(err, ActivityError):
        return _run_failure(err, heartbeat)
    if err is not None:
        return str(err)
    result = handle.result()
    if isinstance(result, RunTrialResult) and result.exit_code != 0:
        return result.message or f"exit code {result.exit_code}"
    return None


def _run_failure(err: ActivityError, heartbeat: timedelta) -> str:
    """Why a run activity failed, in words for the trial's logs."""
    cause = err.cause
    if isinstance(cause, ActivityTimeout):
        if cause.type == TimeoutType.HEARTBEAT:
            return (f"agent lost or unresponsive (no heartbeat for "
                    f"{heartbeat.total_seconds():g} s)")
        if cause.type == TimeoutType.SCHEDULE_TO_START:
            return "agent lost (it never started the run)"
    return str(cause or err)

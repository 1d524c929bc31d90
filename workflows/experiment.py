"""ExperimentWorkflow: drives the searcher and runs each trial it asks for as a TrialWorkflow.

Everything that happens reaches the workflow as a message and is queued: validations at the
searcher's decision points (from the API, update `decide_validation`, which answers whether the
searcher stopped the trial), trials closing (signal `trial_closed`, which each trial sends
through the master's client as it ends), and the user's pause, activate, cancel and kill
(signals). The main loop hands each event to the searcher (workflows/searchers) and applies the
operations it answers with: create a trial, let one go on to its next rung, stop one early.
Trials are started up to the searcher's concurrency.

A trial is this experiment's child workflow (Temporal's UI shows the relation; ParentClosePolicy
ABANDON, so the trial outlives a continue-as-new) and never reports through its result: its end
comes by signal, which reaches whichever run of the experiment is current. So the experiment
continues-as-new while trials run, carrying `ExperimentCarry` (the search's snapshot and its own
bookkeeping). Histories before CHILD_TRIALS_PATCH replay the earlier ways: from LOCAL_CALLS_PATCH
the master's client started the trials (`start_trial`, no relation), before it they were
children signalling their end themselves (TrialInput.revision says which to each trial).

It ends in Temporal's status that matches its state (workflows/temporal_status.py), and a cancel
request made in Temporal's UI cancels it as the user's `cancel` does.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from common.expconf import SearcherConfig, stored_config
    from common.search_attributes import EXPERIMENT_ID, OWNER, STATE, trial_attributes
    from common.states import EndState, ExperimentState
    from common.temporal_names import (
        EXPERIMENT_WORKFLOW,
        MASTER_TASK_QUEUE,
        ExperimentMessages,
        TrialMessages,
        trial_workflow_id,
    )
    from wire.pools import PoolMove
    from wire.workflow_io import (
        LOCAL_CALLS_REVISION,
        TEMPORAL_STATUS_REVISION,
        TRIAL_REVISION,
        CreateTrialInput,
        ExperimentCarry,
        ExperimentInput,
        FinishExperimentInput,
        RecordExperimentStateInput,
        RecordSearchInput,
        SampleHparamsInput,
        StartTrialInput,
        TrialInput,
        TrialOutcome,
        ValidationReport,
    )
    from workflows.db_activities import (
        CREATE_TRIAL_CALL,
        FINISH_EXPERIMENT_CALL,
        LOCAL_CALLS_PATCH,
        RECORD_EXPERIMENT_STATE_CALL,
        RECORD_SEARCH_CALL,
        SAMPLE_TRIAL_HPARAMS_CALL,
        START_TRIAL_CALL,
    )
    from workflows.searchers import make_search, trial_seed
    from workflows.searchers.base import (
        ERRORED,
        USER_STOPPED,
        Continue,
        Create,
        Op,
        SearchMethod,
        Stop,
    )
    from workflows.searchers.fixed import FixedSearch
    from workflows.temporal_status import cancel_requested, end_canceled, end_failed, run_shielded
    from workflows.trial import TrialWorkflow

# The experiment's end (`finish_experiment`: its rows, then the checkpoints GC drops) heartbeats,
# so a master that dies while it runs has it retried after this, not after GC_TIMEOUT.
FINISH_HEARTBEAT = timedelta(seconds=30)
FINISH_HEARTBEAT_PATCH = "experiment-finish-heartbeats"
# Pause, activate, cancel and kill write the experiment's state and signal its trials one
# message at a time (before it, a quick pause-activate could store PAUSED last).
SERIAL_MESSAGES_PATCH = "experiment-messages-in-order"
# What continue-as-new carries stays small however many trials the experiment has: trials a
# fixed search has not started are regenerated from its seed (`pending_from`), and only the
# running trials' request ids and validation lengths are kept.
COMPACT_CARRY_PATCH = "experiment-compact-carry"
# Temporal tells the truth about an experiment: one started with Epochal's search attributes
# keeps `EpochalState` as the database does, and one that ended in ERROR or CANCELED ends
# failed (ExperimentError, ExperimentCanceled), not completed; CANCELED ends Canceled since
# CANCELED_END_PATCH.
SEARCH_STATE_PATCH = "experiment-search-state"
FAILED_END_PATCH = "experiment-ends-failed"
# A draw of the searcher's sampler that fails (an option it cannot work with) ends the search in
# ERROR, saying why; before, it failed the workflow and left the experiment ACTIVE.
SAMPLER_ERROR_PATCH = "experiment-sampler-failure-errors"
# Issue 34, Temporal tells the truth. A cancel request (Temporal's UI) stops the experiment as
# the user's cancel does, instead of interrupting it wherever it awaited (checked when a run
# starts); one that ended CANCELED ends Canceled, not Failed (checked at its end, so that a run
# started before the change ends so too); its trials are its child workflows again, of
# TRIAL_REVISION (checked at the first trial a run starts).
EXTERNAL_CANCEL_PATCH = "experiment-takes-cancel-requests"
CANCELED_END_PATCH = "experiment-ends-canceled"
CHILD_TRIALS_PATCH = "experiment-trials-are-children"
# Issue 36: trials it starts are of RUN_SPEC_REVISION (their runs carry a RunSpec), decided once
# per run here rather than by a marker in every trial's history.
RUN_SPEC_TRIALS_PATCH = "experiment-trials-carry-run-specs"
# Issue 38: the experiment moves to another resource pool (`move_to_pool`, from `det job update
# --resource-pool`): trials it starts from then on, and the config continue-as-new carries, name
# the new pool, and its running trials are told. Only a moved experiment writes the marker.
POOL_MOVE_PATCH = "experiment-moves-to-another-pool"


@workflow.defn(name=EXPERIMENT_WORKFLOW)
class ExperimentWorkflow:
    @workflow.init
    def __init__(self, inp: ExperimentInput) -> None:
        self._experiment_id = inp.experiment_id  # signals may run before `run` starts
        c = self._carried(inp)
        self._state = c.state
        self._paused = c.paused
        self._stop = c.stop  # TrialMessages.CANCEL or KILL once asked to stop
        self._pending = c.pending  # Create ops not started yet
        self._running = c.running  # trial id: request id
        self._trial_of = c.trial_of  # request id: trial id
        self._counts = c.counts  # ended trials by EndState
        self._seen = c.seen  # trial id: the last validation length handed to the searcher
        self._error = c.error  # the sampler failed: no more trials
        self._events: list[tuple[str, Any]] = []
        # Decisions on validations whose reports wait for them (`decide_validation`): whether
        # the searcher stopped that trial, kept while someone waits, by (trial, length).
        self._decisions: dict[tuple[int, int], bool] = {}
        self._deciding: dict[tuple[int, int], int] = {}
        self._finishing = False
        self._messages = asyncio.Lock()  # serialises the user's messages' side effects
        self._takes_cancel_requests = False  # EXTERNAL_CANCEL_PATCH
        self._moved_to: str | None = None  # POOL_MOVE_PATCH: the pool it was moved to

    @staticmethod
    def _carried(inp: ExperimentInput) -> ExperimentCarry:
        """What the run before carried (the data converter reads it as one), or a fresh start."""
        if inp.carried is None:
            return ExperimentCarry()
        if not isinstance(inp.carried, ExperimentCarry):  # a value none of its fields can hold
            raise TypeError(f"carried state is no ExperimentCarry: keys {sorted(inp.carried)}")
        return inp.carried

    def _retrieve(self, child: asyncio.Task[Any]) -> None:
        """A trial's end reaches the experiment by signal (it may outlive this run); its
        result, or its failure, is taken here so that asyncio reports no stray error."""
        if not child.cancelled():
            child.exception()

    # -- the loop ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ExperimentInput) -> str:
        if workflow.patched(EXTERNAL_CANCEL_PATCH):
            self._takes_cancel_requests = True
            return await run_shielded(self._run(inp))
        return await self._run(inp)

    async def _run(self, inp: ExperimentInput) -> str:
        carried = None if inp.carried is None else self._carried(inp)
        config = stored_config(inp.config)  # the API validated it: read through the model
        search = make_search(config, inp.seed, carried.search if carried else None)
        if carried is None:
            await self._apply(search.initial())
        elif carried.pending_from is not None:  # regenerated: the same creates, same seed
            first = carried.pending_from
            await self._apply([op for op in search.initial()
                               if isinstance(op, Create) and op.request_id >= first])
        while True:
            await workflow.wait_condition(
                lambda: bool(self._events)
                or self._can_start(search)
                or self._idle()
                or self._only_waiting(search)
                or self._cancel_requested()
            )
            if self._cancel_requested():
                await self.cancel()
            while self._events:
                kind, event = self._events.pop(0)
                if kind == "validation":
                    stopped = await self._on_validation(search, event)
                    key = (event.trial_id, event.length)
                    if key in self._deciding:  # a duplicate keeps the first one's answer
                        self._decisions.setdefault(key, stopped)
                else:
                    await self._on_closed(search, event)
            if self._stop is not None:
                self._pending.clear()
            while self._can_start(search):
                await self._start_trial(inp, config.searcher)
            if self._only_waiting(search):
                await self._apply(search.finish_waiting())
            if self._idle() and not self._pending and not self._events:
                break
            if self._should_continue_as_new(inp):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    ExperimentInput(
                        experiment_id=inp.experiment_id,
                        config=self._config(inp),
                        seed=inp.seed,
                        carried=self._carry(search).to_json(),
                        max_history_events=inp.max_history_events,
                        agent_timeout_seconds=inp.agent_timeout_seconds,
                    )
                )
        self._finishing = True  # no more events are handled: updates are refused
        final = self._final_state()
        self._state = final
        await FINISH_EXPERIMENT_CALL(
            FinishExperimentInput(experiment_id=inp.experiment_id, state=final,
                                  error=self._error),
            heartbeat=FINISH_HEARTBEAT if workflow.patched(FINISH_HEARTBEAT_PATCH) else None,
        )
        self._show_state(final)
        ended = (ExperimentState.ERROR, ExperimentState.CANCELED)
        if final in ended and workflow.patched(FAILED_END_PATCH):
            if final == ExperimentState.ERROR:
                end_failed(
                    f"experiment {inp.experiment_id} ended in ERROR: "
                    + (self._error or f"all {self._counts.get(EndState.ERROR, 0)} of its "
                                      "trials failed"),
                    "ExperimentError")
            if workflow.patched(CANCELED_END_PATCH):
                await end_canceled(self._stop_reason())
            raise ApplicationError(f"experiment {inp.experiment_id} was {self._stop_reason()}",
                                   type="ExperimentCanceled", non_retryable=True)
        return final

    def _config(self, inp: ExperimentInput) -> dict[str, Any]:
        """The experiment's config as its trials get it: the input's, in the pool it was moved
        to, if any."""
        if self._moved_to is None:
            return inp.config
        return {**inp.config,
                "resources": {**inp.config.get("resources", {}), "resource_pool": self._moved_to}}

    def _stop_reason(self) -> str:
        return "killed" if self._stop == TrialMessages.KILL else "canceled"

    def _cancel_requested(self) -> bool:
        """A cancel request (Temporal's UI) this experiment has not acted on yet."""
        return self._takes_cancel_requests and self._stop is None and cancel_requested()

    def _show_state(self, state: ExperimentState) -> None:
        """The state, in the `EpochalState` search attribute of a workflow started with them."""
        if (workflow.info().typed_search_attributes.get(EXPERIMENT_ID) is not None
                and workflow.patched(SEARCH_STATE_PATCH)):
            workflow.upsert_search_attributes([STATE.value_set(state)])

    def _active(self, search: SearchMethod) -> int:
        """Trials holding slots: running, not waiting at a rung for a promotion."""
        waiting = search.waiting()
        return sum(1 for request in self._running.values() if request not in waiting)

    def _can_start(self, search: SearchMethod) -> bool:
        if self._paused or self._stop is not None or not self._pending:
            return False
        limit = search.concurrency()
        return limit is None or self._active(search) < limit

    def _only_waiting(self, search: SearchMethod) -> bool:
        """Every running trial waits at a rung and nothing more will start: promotions can no
        longer come, so the waiting trials are done."""
        no_more = self._stop is not None or not self._pending
        return no_more and bool(self._running) and self._active(search) == 0

    def _idle(self) -> bool:
        return not self._running and (self._stop is not None or not self._pending)

    def _should_continue_as_new(self, inp: ExperimentInput) -> bool:
        if self._events or self._cancel_requested():  # the next run would not see the request
            return False
        info = workflow.info()
        if inp.max_history_events:
            return info.get_current_history_length() >= inp.max_history_events
        return info.is_continue_as_new_suggested()

    def _carry(self, search: SearchMethod) -> ExperimentCarry:
        # Since COMPACT_CARRY_PATCH: operations and validations only ever concern running
        # trials, and a fixed search's pending trials are regenerated from where they start.
        compact = workflow.patched(COMPACT_CARRY_PATCH)
        first = self._regenerable_from(search) if compact else None
        return ExperimentCarry(
            search=search.snapshot(),
            state=self._state,
            paused=self._paused,
            stop=self._stop,
            pending=self._pending if first is None else [],
            pending_from=first,
            running=dict(self._running),
            trial_of={k: v for k, v in self._trial_of.items()
                      if not compact or v in self._running},
            counts=self._counts,
            seen={k: v for k, v in self._seen.items() if not compact or k in self._running},
            error=self._error,
        )

    def _regenerable_from(self, search: SearchMethod) -> int | None:
        """The first pending request id when the pending trials are exactly the rest of a
        fixed search's list (which `initial()` regenerates); None otherwise."""
        if not isinstance(search, FixedSearch) or search.total < 0:
            return None
        first = search.total - len(self._pending)
        ids = [int(p["request_id"]) for p in self._pending]
        return first if ids == list(range(first, search.total)) else None

    def _final_state(self) -> ExperimentState:
        if self._stop is not None:
            return ExperimentState.CANCELED
        if self._error is not None:
            return ExperimentState.ERROR
        total = sum(self._counts.values())
        if total and self._counts.get(EndState.ERROR, 0) == total:
            return ExperimentState.ERROR
        return ExperimentState.COMPLETED

    # -- events ------------------------------------------------------------------------------

    async def _on_validation(self, search: SearchMethod, report: ValidationReport) -> bool:
        """Whether the searcher stopped the trial on it."""
        request = self._running.get(report.trial_id)
        if request is None or report.length <= self._seen.get(report.trial_id, -1):
            return False  # a closed trial, or a report delivered twice
        self._seen[report.trial_id] = report.length
        ops = search.on_validation(request, report.length, report.metric)
        await self._apply(ops)
        return any(isinstance(op, Stop) and op.early and op.request_id == request for op in ops)

    async def _on_closed(self, search: SearchMethod, outcome: TrialOutcome) -> None:
        request = self._running.pop(outcome.trial_id, None)
        if request is None:
            return  # delivered twice
        self._counts[outcome.state] = self._counts.get(outcome.state, 0) + 1
        reason = outcome.early_exit_reason
        if reason is None and not outcome.stopped_early:
            if outcome.state == EndState.ERROR:
                reason = ERRORED
            elif outcome.state == EndState.CANCELED:
                reason = USER_STOPPED
        await self._apply(search.on_closed(request, reason))

    async def _apply(self, ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, Create):
                if self._error is not None:
                    continue  # the sampler failed: the search creates no more trials
                self._pending.append(
                    {
                        "request_id": op.request_id,
                        "hparams": op.hparams,
                        "target": op.target,
                        "decision": op.decision,
                    }
                )
                continue
            trial_id = self._trial_of.get(op.request_id)
            if trial_id is None or trial_id not in self._running:
                continue
            if isinstance(op, Continue):
                if op.target is not None:
                    await self._signal_trial(trial_id, TrialMessages.CONTINUE_TO, op.target)
                status = f"promoted to rung {op.rung}" if op.target else f"in rung {op.rung}"
                await self._record_search(trial_id, op.decision, op.rung, status)
            elif isinstance(op, Stop):
                if op.early:
                    await self._signal_trial(trial_id, TrialMessages.STOP_EARLY)
                status = f"stopped early at rung {op.rung}" if op.early else "trained to the end"
                await self._record_search(trial_id, None, op.rung, status)

    async def _record_search(
        self, trial_id: int, length: int | None, rung: int, status: str
    ) -> None:
        await RECORD_SEARCH_CALL(
            RecordSearchInput(trial_id=trial_id, search_length=length, rung=rung, status=status))

    async def _start_trial(self, inp: ExperimentInput, searcher: SearcherConfig) -> None:
        create = self._pending.pop(0)
        request_id = int(create["request_id"])
        seed = trial_seed(inp.seed, request_id)
        if create["hparams"] is None:  # the searcher's sampler draws them, from the reports
            try:
                create["hparams"] = await SAMPLE_TRIAL_HPARAMS_CALL(
                    SampleHparamsInput(experiment_id=inp.experiment_id, request_id=request_id,
                                       experiment_seed=inp.seed),
                    local=False)
            except ActivityError as err:
                if not workflow.patched(SAMPLER_ERROR_PATCH):
                    raise
                # Running trials finish; no trial is created any more, and the search ends.
                self._error = str(err.cause.message if isinstance(err.cause, ApplicationError)
                                  else err)
                self._pending.clear()
                return
        trial_id = await CREATE_TRIAL_CALL(
            CreateTrialInput(
                experiment_id=inp.experiment_id,
                request_id=request_id,
                hparams=create["hparams"],
                trial_seed=seed,
                search_length=create["decision"],
            ),
        )
        self._trial_of[request_id] = trial_id
        start_paused = self._paused
        local = workflow.patched(LOCAL_CALLS_PATCH)
        # Never asked of a run that started trials before LOCAL_CALLS_PATCH: its histories
        # take the last branch below.
        child = local and workflow.patched(CHILD_TRIALS_PATCH)
        trial = TrialInput(
            experiment_id=inp.experiment_id,
            trial_id=trial_id,
            request_id=request_id,
            hparams=create["hparams"],
            config=self._config(inp),
            trial_seed=seed,
            start_paused=start_paused,
            target=create["target"],
            length_unit=searcher.length_unit,
            waits_at_target=searcher.waits_at_rung and create["decision"] is not None,
            revision=(TRIAL_REVISION if child and workflow.patched(RUN_SPEC_TRIALS_PATCH)
                      else TEMPORAL_STATUS_REVISION if child
                      else LOCAL_CALLS_REVISION if local else 0),
            agent_timeout_seconds=inp.agent_timeout_seconds,
        )
        workflow_id = trial_workflow_id(inp.experiment_id, trial_id)
        if child:
            await self._start_child(trial, workflow_id)
        elif local:  # started by the master's client: no child events in this history
            await START_TRIAL_CALL(StartTrialInput(
                workflow_id=workflow_id, trial=trial,
                not_before=workflow.info().workflow_start_time.timestamp()))
        else:
            await workflow.start_child_workflow(
                TrialWorkflow.run,
                trial,
                id=workflow_id,
                task_queue=MASTER_TASK_QUEUE,
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        self._running[trial_id] = request_id
        # Signals that arrived while the child was starting were not forwarded to it.
        if self._stop is not None:
            await self._signal_trial(trial_id, self._stop)
        elif self._paused != start_paused:
            await self._signal_trial(
                trial_id, TrialMessages.PAUSE if self._paused else TrialMessages.ACTIVATE)
        # Moved while the trial started: its input names the old pool.
        if self._moved_to and trial.config["resources"]["resource_pool"] != self._moved_to:
            await self._signal_trial(trial_id, TrialMessages.MOVE_TO_POOL, PoolMove(self._moved_to))

    async def _start_child(self, trial: TrialInput, workflow_id: str) -> None:
        """Start the trial's workflow as this experiment's child. ABANDON: the trial outlives
        a continue-as-new (the policy applies at every close of this run) and reports its end
        by signal. A trial id used again (`det experiment continue`) starts anew once its last
        workflow has closed; one still running (right after a stop) is the trial already."""
        own = workflow.info().typed_search_attributes
        attributes = None
        if own.get(EXPERIMENT_ID) is not None:  # the namespace knows Epochal's attributes
            attributes = trial_attributes(trial.experiment_id, trial.trial_id, trial.config,
                                          owner=own.get(OWNER))
        try:
            handle = await workflow.start_child_workflow(
                TrialWorkflow.run,
                trial,
                id=workflow_id,
                task_queue=MASTER_TASK_QUEUE,
                parent_close_policy=ParentClosePolicy.ABANDON,
                search_attributes=attributes,
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.info("trial %s is running already", trial.trial_id)
            return
        handle.add_done_callback(self._retrieve)

    async def _signal_trial(self, trial_id: int, signal: str, *args: Any) -> None:
        """Signal a running trial; one that has just ended (its `trial_closed` not yet handled)
        cannot take signals any more, and needs none."""
        handle = workflow.get_external_workflow_handle(
            trial_workflow_id(self._experiment_id, trial_id)
        )
        try:
            await handle.signal(signal, *args)
        except Exception as err:  # the trial's workflow is closed
            workflow.logger.info("trial %s did not take %s: %s", trial_id, signal, err)

    # -- messages ----------------------------------------------------------------------------

    async def _set_state(self, state: ExperimentState) -> None:
        self._state = state
        await RECORD_EXPERIMENT_STATE_CALL(
            RecordExperimentStateInput(experiment_id=self._experiment_id, state=state))
        self._show_state(state)

    async def _forward(self, signal: str) -> None:
        for trial_id in list(self._running):
            await self._signal_trial(trial_id, signal)

    @workflow.signal(name=ExperimentMessages.VALIDATION_REPORTED)
    def validation_reported(self, report: ValidationReport) -> None:
        """The validation without an answer: the same exchange as `decide_validation` when
        Temporal cannot admit the update (it bounds the updates in flight per workflow, and a
        decision waits for the searcher's activities), so a burst of reports at one rung is
        never refused (services/search_gate.py); the decision then reaches the trial through its
        preemption poll. It was the whole protocol before the update (the histories
        tests/replay/histories/asha-*-experiment, -local-calls, -before-local-db hold it)."""
        self._events.append(("validation", report))

    @workflow.update(name=ExperimentMessages.DECIDE_VALIDATION)
    async def decide_validation(self, report: ValidationReport) -> bool:
        """The validation, as the signal gives it; answers once the searcher has acted on it
        (a stopped trial has been told): True when it stopped the trial. The API answers the
        trial's report with it, so the trial stops at the step the searcher decided on."""
        key = (report.trial_id, report.length)
        self._deciding[key] = self._deciding.get(key, 0) + 1
        self._events.append(("validation", report))
        await workflow.wait_condition(lambda: key in self._decisions)
        stopped = self._decisions[key]
        self._deciding[key] -= 1
        if not self._deciding[key]:
            del self._deciding[key], self._decisions[key]
        return stopped

    @decide_validation.validator
    def _validation_taken(self, report: ValidationReport) -> None:
        if self._finishing:
            raise ValueError("the experiment has ended; its searcher takes no validations")

    @workflow.signal(name=ExperimentMessages.TRIAL_CLOSED)
    def trial_closed(self, outcome: TrialOutcome) -> None:
        self._events.append(("closed", outcome))

    async def _announce(self, state: ExperimentState, signal: str) -> None:
        """Store the experiment's new state and pass the message on to its trials, after the
        messages before it (`SERIAL_MESSAGES_PATCH`)."""
        if not workflow.patched(SERIAL_MESSAGES_PATCH):
            await self._set_state(state)
            await self._forward(signal)
            return
        async with self._messages:
            await self._set_state(state)
            await self._forward(signal)

    @workflow.signal(name=ExperimentMessages.PAUSE)
    async def pause(self) -> None:
        if self._stop is not None or self._paused:
            return
        self._paused = True
        await self._announce(ExperimentState.PAUSED, TrialMessages.PAUSE)

    @workflow.signal(name=ExperimentMessages.ACTIVATE)
    async def activate(self) -> None:
        if self._stop is not None or not self._paused:
            return
        self._paused = False
        await self._announce(ExperimentState.ACTIVE, TrialMessages.ACTIVATE)

    @workflow.signal(name=ExperimentMessages.CANCEL)
    async def cancel(self) -> None:
        if self._stop is not None:
            return
        self._stop = TrialMessages.CANCEL
        await self._announce(ExperimentState.STOPPING_CANCELED, TrialMessages.CANCEL)

    @workflow.signal(name=ExperimentMessages.KILL)
    async def kill(self) -> None:
        if self._stop == TrialMessages.KILL:
            return
        self._stop = TrialMessages.KILL
        await self._announce(ExperimentState.STOPPING_KILLED, TrialMessages.KILL)

    @workflow.signal(name=ExperimentMessages.MOVE_TO_POOL)
    async def move_to_pool(self, move: PoolMove) -> None:
        """Its trials' requests go to another pool from now on (the API checked the pool)."""
        if self._stop is not None or not workflow.patched(POOL_MOVE_PATCH):
            return
        self._moved_to = move.pool
        async with self._messages:
            for trial_id in list(self._running):
                await self._signal_trial(trial_id, TrialMessages.MOVE_TO_POOL, move)

    @workflow.query(name=ExperimentMessages.DESCRIBE)
    def describe(self) -> dict[str, object]:
        return {
            "state": self._state,
            "running": sorted(self._running),
            "pending": len(self._pending),
            "outcomes": dict(self._counts),
        }

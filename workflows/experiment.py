"""ExperimentWorkflow: asks the searcher for trials and runs each as a child TrialWorkflow.

At most `max_concurrent_trials` children are in flight (a sliding window), so pending children
stay far below Temporal's limits. Pause, activate, cancel and kill are signals that the experiment
applies to itself (no new trials while paused or stopping) and forwards to running trials.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.constants import MASTER_TASK_QUEUE, trial_workflow_id
    from workflows.searchers import generate_trials, trial_seed
    from workflows.trial import TrialWorkflow
    from workflows.types import (
        JSON,
        CreateTrialInput,
        ExperimentInput,
        FinishExperimentInput,
        RecordExperimentStateInput,
        RecordTrialStateInput,
        TrialInput,
        TrialOutcome,
    )

DB_ACTIVITY_TIMEOUT = timedelta(seconds=30)
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
GC_TIMEOUT = timedelta(minutes=10)


@workflow.defn(name="ExperimentWorkflow")
class ExperimentWorkflow:
    @workflow.init
    def __init__(self, inp: ExperimentInput) -> None:
        self._experiment_id = inp.experiment_id  # signals may run before `run` starts
        self._state = "ACTIVE"
        self._paused = False
        self._stop: str | None = None  # "cancel" or "kill" once asked to stop
        self._children: dict[str, workflow.ChildWorkflowHandle[TrialWorkflow, TrialOutcome]] = {}
        self._in_flight = 0
        self._outcomes: dict[int, TrialOutcome] = {}
        self._trial_ids: list[int] = []

    @workflow.run
    async def run(self, inp: ExperimentInput) -> str:
        pending = list(enumerate(generate_trials(inp.config, inp.seed)))
        pending.reverse()  # pop() from the end takes request 0 first
        limit = int(inp.config["searcher"].get("max_concurrent_trials") or 0) or len(pending)
        tasks: list[asyncio.Task[None]] = []
        while True:
            await workflow.wait_condition(
                lambda: (
                    self._stop is not None
                    or (not self._paused and bool(pending) and self._in_flight < limit)
                    or (not pending and self._in_flight == 0)
                )
            )
            if self._stop is not None or not pending:
                break
            request_id, hparams = pending.pop()
            self._in_flight += 1
            tasks.append(asyncio.create_task(self._run_trial(inp, request_id, hparams)))
        if tasks:
            await asyncio.gather(*tasks)
        final = self._final_state()
        self._state = final
        await workflow.execute_activity(
            "finish_experiment",
            FinishExperimentInput(experiment_id=inp.experiment_id, state=final),
            start_to_close_timeout=GC_TIMEOUT,
            retry_policy=DB_RETRY,
        )
        return final

    def _final_state(self) -> str:
        if self._stop is not None:
            return "CANCELED"
        states = [o.state for o in self._outcomes.values()]
        if states and all(s == "ERROR" for s in states):
            return "ERROR"
        return "COMPLETED"

    async def _run_trial(self, inp: ExperimentInput, request_id: int, hparams: JSON) -> None:
        try:
            seed = trial_seed(inp.seed, request_id)
            trial_id: int = await workflow.execute_activity(
                "create_trial",
                CreateTrialInput(
                    experiment_id=inp.experiment_id,
                    request_id=request_id,
                    hparams=hparams,
                    trial_seed=seed,
                ),
                result_type=int,
                start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
                retry_policy=DB_RETRY,
            )
            self._trial_ids.append(trial_id)
            if self._stop is not None:
                await workflow.execute_activity(
                    "record_trial_state",
                    RecordTrialStateInput(trial_id=trial_id, state="CANCELED", ended=True),
                    start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
                    retry_policy=DB_RETRY,
                )
                self._outcomes[trial_id] = TrialOutcome(trial_id=trial_id, state="CANCELED")
                return
            child_id = trial_workflow_id(inp.experiment_id, trial_id)
            start_paused = self._paused
            handle = await workflow.start_child_workflow(
                TrialWorkflow.run,
                TrialInput(
                    experiment_id=inp.experiment_id,
                    trial_id=trial_id,
                    request_id=request_id,
                    hparams=hparams,
                    config=inp.config,
                    trial_seed=seed,
                    start_paused=start_paused,
                ),
                id=child_id,
                task_queue=MASTER_TASK_QUEUE,
            )
            self._children[child_id] = handle
            # Signals that arrived while the child was starting were not forwarded to it.
            if self._stop is not None:
                await handle.signal(self._stop)
            elif self._paused != start_paused:
                await handle.signal("pause" if self._paused else "activate")
            self._outcomes[trial_id] = await handle
            del self._children[child_id]
        finally:
            self._in_flight -= 1

    async def _set_state(self, experiment_id: int, state: str) -> None:
        self._state = state
        await workflow.execute_activity(
            "record_experiment_state",
            RecordExperimentStateInput(experiment_id=experiment_id, state=state),
            start_to_close_timeout=DB_ACTIVITY_TIMEOUT,
            retry_policy=DB_RETRY,
        )

    async def _forward(self, signal: str) -> None:
        for handle in list(self._children.values()):
            await handle.signal(signal)

    @workflow.signal
    async def pause(self) -> None:
        if self._stop is not None or self._paused:
            return
        self._paused = True
        await self._set_state(self._experiment_id, "PAUSED")
        await self._forward("pause")

    @workflow.signal
    async def activate(self) -> None:
        if self._stop is not None or not self._paused:
            return
        self._paused = False
        await self._set_state(self._experiment_id, "ACTIVE")
        await self._forward("activate")

    @workflow.signal
    async def cancel(self) -> None:
        if self._stop is not None:
            return
        self._stop = "cancel"
        await self._set_state(self._experiment_id, "STOPPING_CANCELED")
        await self._forward("cancel")

    @workflow.signal
    async def kill(self) -> None:
        if self._stop == "kill":
            return
        self._stop = "kill"
        await self._set_state(self._experiment_id, "STOPPING_KILLED")
        await self._forward("kill")

    @workflow.query
    def describe(self) -> dict[str, object]:
        return {
            "state": self._state,
            "trial_ids": list(self._trial_ids),
            "in_flight": self._in_flight,
            "outcomes": {str(k): v.state for k, v in self._outcomes.items()},
        }

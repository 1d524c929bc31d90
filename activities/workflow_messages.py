"""What a workflow asks of another through an activity and the master's Temporal client.

A signal sent by a workflow command costs the sender two more history events and a workflow
task (the signal's confirmation wakes it); sent by a local activity it costs one marker in the
task that sent it. Likewise a trial started as a child workflow costs its experiment a workflow
task when it starts and another when it ends. So an experiment starts its trials, and each trial
tells its experiment it ended, this way (TRIAL_REVISION). A retried activity may do it twice:
the second start finds the trial's workflow started, and the experiment drops a trial's second
`trial_closed`.

Since TEMPORAL_STATUS_REVISION trials are child workflows again (Temporal's UI shows each
experiment's trials), and only their end goes by this route. A workflow that ended canceled asks
here for its own cancel (`request_cancel`), which Temporal cannot take from the workflow itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from common.search_attributes import trial_attributes
from common.temporal_names import (
    MASTER_TASK_QUEUE,
    REPORT_TRIAL_CLOSED,
    REQUEST_CANCEL,
    START_TRIAL,
    TRIAL_WORKFLOW,
    ExperimentMessages,
    experiment_workflow_id,
)
from wire.workflow_io import CancelRequestInput, StartTrialInput, TrialClosedInput


class MessageActivities:
    """Activities bound to the master's Temporal client. With `findable` (Epochal's search
    attributes are registered), trials are started with theirs."""

    def __init__(self, client: Client, *, findable: bool = False) -> None:
        self._client = client
        self._findable = findable

    @activity.defn(name=START_TRIAL)
    async def start_trial(self, inp: StartTrialInput) -> None:
        """A retry finds the trial running, or ended: it never runs twice. A continued
        experiment's trial ended in its previous life, before this experiment run began."""
        try:
            await self._start_trial(inp, WorkflowIDReusePolicy.REJECT_DUPLICATE)
        except WorkflowAlreadyStartedError:
            ended = await self._client.get_workflow_handle(inp.workflow_id).describe()
            if ended.start_time.timestamp() < inp.not_before:
                with contextlib.suppress(WorkflowAlreadyStartedError):
                    await self._start_trial(inp, WorkflowIDReusePolicy.ALLOW_DUPLICATE)

    async def _start_trial(self, inp: StartTrialInput, reuse: WorkflowIDReusePolicy) -> None:
        trial = inp.trial
        await self._client.start_workflow(
            TRIAL_WORKFLOW, trial, id=inp.workflow_id, task_queue=MASTER_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, id_reuse_policy=reuse,
            search_attributes=trial_attributes(trial.experiment_id, trial.trial_id, trial.config)
            if self._findable else None)

    @activity.defn(name=REPORT_TRIAL_CLOSED)
    async def report_trial_closed(self, inp: TrialClosedInput) -> bool:
        """False when the experiment has ended (killed, say): nobody to tell."""
        handle = self._client.get_workflow_handle(experiment_workflow_id(inp.experiment_id))
        try:
            await handle.signal(ExperimentMessages.TRIAL_CLOSED, inp.outcome)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True

    @activity.defn(name=REQUEST_CANCEL)
    async def request_cancel(self, inp: CancelRequestInput) -> None:
        """A retry after the request was made is refused or deduplicated by Temporal: done."""
        handle = self._client.get_workflow_handle(inp.workflow_id, run_id=inp.run_id)
        try:
            await handle.cancel(reason=inp.reason)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    def all(self) -> list[Callable[..., Any]]:
        return [self.start_trial, self.report_trial_closed, self.request_cancel]

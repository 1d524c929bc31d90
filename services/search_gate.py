"""The search gate: a trial's validations reach its experiment's searcher only at the lengths it
waits for (ASHA's rungs), and the searcher's decision comes back in the report's answer.

The experiment opens the gate (`trials.search_length`, activities/experiment_store.py) at the
length its searcher waits for next; a validation at or past it is given to the experiment as
its `decide_validation` update, with the `validation_reported` signal as the fallback when the
update cannot be answered in time, and then the gate closes (here). Other validations never
reach the workflow.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import asyncpg
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from common.temporal_names import ExperimentMessages, experiment_workflow_id
from wire.workflow_io import ValidationReport

# How long a validation report waits for its searcher's decision before the validation goes
# to the experiment by signal instead (the decision then reaches the trial through its
# preemption poll, as before).
DECISION_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Validation:
    """A validation a trial reported: its steps and its metrics."""

    steps_completed: int
    metrics: Mapping[str, Any]


async def notify_searcher(pool: asyncpg.Pool, temporal: Client, trial_id: int,
                          validations: Sequence[Validation]) -> bool:
    """Give the experiment the first validation at or past the length its searcher waits for,
    and wait for its decision: True when the searcher stops the trial, so the report's answer
    tells the trial at once."""
    # The length the trial's searcher waits for (NULL: none now), with its experiment and its
    # searcher config.
    row = await pool.fetchrow(
        "SELECT t.search_length, t.experiment_id, e.config -> 'searcher' AS searcher"
        " FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id = $1",
        trial_id,
    )
    if row is None or row["search_length"] is None:
        return False
    searcher = row["searcher"]
    time_metric = searcher.get("time_metric")
    for report in sorted(validations, key=lambda r: r.steps_completed):
        metric = report.metrics.get(searcher["metric"])
        length = report.metrics.get(time_metric) if time_metric else report.steps_completed
        if not _is_number(metric) or not _is_number(length) or length < row["search_length"]:
            continue
        handle = temporal.get_workflow_handle(experiment_workflow_id(row["experiment_id"]))
        validation = ValidationReport(trial_id=trial_id, length=int(length), metric=float(metric))
        try:
            stopped = await _searcher_decision(handle, validation)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False  # the experiment has ended
        # Given first, then the gate closes: a retry may give it twice (the workflow drops the
        # duplicate), never not at all. The experiment opens the gate at the next rung; one
        # opened since stays open.
        await pool.execute(
            "UPDATE trials SET search_length = NULL WHERE id = $1 AND search_length <= $2",
            trial_id, int(length))
        return stopped
    return False


async def _searcher_decision(handle: WorkflowHandle[Any, Any],
                             validation: ValidationReport) -> bool:
    """The experiment's `decide_validation` answer; past DECISION_TIMEOUT_SECONDS, or when the
    workflow takes no more updates now (Temporal bounds those in flight), the validation goes
    by signal and the answer is False (the stop, if any, comes by the preemption poll)."""
    try:
        return await asyncio.wait_for(
            handle.execute_update(ExperimentMessages.DECIDE_VALIDATION, validation,
                                  result_type=bool),
            DECISION_TIMEOUT_SECONDS)
    except (TimeoutError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError):
        pass
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise
    await handle.signal(ExperimentMessages.VALIDATION_REPORTED, validation)
    return False


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

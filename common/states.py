"""Every state an experiment, trial, task, checkpoint, job or allocation is in, as stored and shown
(Determined's names, without `STATE_`): one home each, so a state is never spelled as a string.

They are `StrEnum`s: a member is its name as a string (`ExperimentState.ACTIVE == "ACTIVE"`), so
the database, the JSON answers and Temporal's payloads carry it unchanged, and SQL takes it as a
parameter or, in a constant statement, through `sql_list`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ExperimentState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    # Asked to stop: the trials are told and the experiment ends once they have.
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    DELETED = "DELETED"


class TrialState(StrEnum):
    QUEUED = "QUEUED"  # waiting for slots
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    ACTIVE = "ACTIVE"  # a detached (unmanaged) run's trial, reporting from outside the cluster
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    DELETED = "DELETED"


class TaskState(StrEnum):
    """An interactive task's (command, notebook, shell, TensorBoard), as Determined names them."""

    QUEUED = "QUEUED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


class CheckpointState(StrEnum):
    COMPLETED = "COMPLETED"
    DELETED = "DELETED"


class JobState(StrEnum):
    """A job of the job queue (an experiment's or an interactive task's), as Determined's
    jobv1State names it."""

    SCHEDULED = "SCHEDULED"  # holding slots
    QUEUED = "QUEUED"  # waiting for them


class AllocationState(StrEnum):
    """A slot request as its resource pool answers it (`SlotReply.status`; lowercase, as the
    pool has always sent it)."""

    GRANTED = "granted"  # the slots are the caller's now
    QUEUED = "queued"  # waiting: the grant comes later by signal `slots_granted`


class EndState(StrEnum):
    """How a run of work ended: the state its record is left in and its workflow's status."""

    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


# Nothing runs or will run again in these (an ended experiment may be continued as new runs).
TERMINAL_STATES = frozenset({ExperimentState.COMPLETED, ExperimentState.CANCELED,
                             ExperimentState.ERROR, ExperimentState.DELETED})


def sql_list(states: Iterable[StrEnum]) -> str:
    """`'A', 'B'` for a constant statement's `IN (...)`: members only, so never a user's text."""
    return ", ".join(f"'{state.value}'" for state in states)

"""Detached ("unmanaged") experiments and trials: Determined's `core_v2` run outside the cluster.

A script on a user's machine creates the experiment (`POST /experiments` with `unmanaged`, or
`PUT /experiments/by-external-id/{id}`) and its trials (`POST`/`PUT /trials`), starts each
run (`POST /trials/{id}/start`), reports metrics, checkpoints and logs as a managed trial does,
and says when the trial runs and how it ended (`PATCH /trials/{id}`), all with its owner's own
session. No workflow runs them: the cluster records what the script says, and shows them among
the rest with `unmanaged` set. The experiment ends once none of its trials runs; killing it
marks it and its trials CANCELED (the cluster cannot stop a script it does not run), and
pausing or activating it is refused saying so. A script run again (the same external ids)
starts an ended trial anew, and a new trial reopens an experiment that had completed or
failed: Determined's scripts report to one experiment one after another.
"""

from __future__ import annotations

import secrets
from typing import Any

import asyncpg

from api.errors import ApiError, not_found
from api.queries import unmanaged as queries
from common.states import TrialState

MAX_EXTERNAL_ID = 128  # characters of an external experiment or trial id

# Determined's trial states a detached run may report, and whether each ends the trial.
# Stopped by their user (or deleted): a script run again does not bring them back.
STOPPED = frozenset({TrialState.CANCELED, TrialState.DELETED})
REPORTED_STATES: dict[str, bool] = {
    TrialState.ACTIVE: False, TrialState.RUNNING: False, TrialState.COMPLETED: True,
    TrialState.ERROR: True, TrialState.CANCELED: True}


async def control(pool: asyncpg.Pool, experiment_id: int, action: str) -> None:
    """`det experiment kill|cancel|pause|activate` of an unmanaged experiment."""
    if action not in ("kill", "cancel"):
        raise ApiError(409, f"experiment {experiment_id} is unmanaged: its trials run outside "
                       f"the cluster, which cannot {action} them")
    await queries.cancel_experiment(pool, experiment_id)


async def trial_of(pool: asyncpg.Pool, trial_id: int) -> asyncpg.Record:
    """The trial with its experiment's owner and whether it is unmanaged; 404 if none."""
    trial = await queries.fetch_trial(pool, trial_id)
    if trial is None:
        raise not_found("trial", trial_id)
    return trial


async def require_unmanaged_trial(pool: asyncpg.Pool, trial_id: int) -> asyncpg.Record:
    trial = await trial_of(pool, trial_id)
    if not trial["unmanaged"]:
        raise ApiError(409, f"trial {trial_id} is run by the cluster: only its own runs start "
                       "it and say its state")
    return trial


async def create_trial(pool: asyncpg.Pool, experiment_id: int, hparams: dict[str, Any] | None,
                       external_id: str | None) -> int:
    """A trial of the unmanaged experiment (the existing one with `external_id`)."""
    experiment = await queries.fetch_experiment(pool, experiment_id)
    if experiment is None:
        raise not_found("experiment", experiment_id)
    if not experiment["unmanaged"]:
        raise ApiError(400, f"experiment {experiment_id} is run by the cluster: its searcher "
                       "makes its trials", ["experimentId: name an unmanaged experiment"])
    if experiment["state"] in STOPPED:
        raise ApiError(409, f"experiment {experiment_id} is {experiment['state']}: it takes "
                       "no more trials")
    trial_id = await queries.insert_trial(pool, experiment_id, hparams or {},
                                          secrets.randbelow(2**31), external_id)
    await queries.reopen_experiment(pool, experiment_id)  # its scripts may come one by one
    return trial_id


async def start_run(pool: asyncpg.Pool, trial_id: int, resume: bool) -> asyncpg.Record:
    """The trial's next run (Determined's StartTrial): its run id and where it resumes."""
    trial = await require_unmanaged_trial(pool, trial_id)
    if trial["state"] in STOPPED:
        raise ApiError(409, f"trial {trial_id} is {trial['state']}: it runs no more")
    started = await queries.start_run(pool, trial_id, resume)  # an ended one runs again
    await queries.reopen_experiment(pool, trial["experiment_id"])
    return started


async def report_state(pool: asyncpg.Pool, trial_id: int, state: str | None) -> None:
    """A detached run's heartbeat (no state) or state; a trial's end may end its experiment."""
    trial = await require_unmanaged_trial(pool, trial_id)
    if state is None:
        return
    if state not in REPORTED_STATES:
        raise ApiError(400, f"state: {state} is not one a detached run reports",
                       [f"state: one of {', '.join(f'STATE_{s}' for s in REPORTED_STATES)}"])
    if not await queries.set_trial_state(pool, trial_id, state, REPORTED_STATES[state]):
        raise ApiError(409, f"trial {trial_id} is {trial['state']}: it has ended")
    if REPORTED_STATES[state]:
        await queries.end_experiment_if_done(pool, trial["experiment_id"])

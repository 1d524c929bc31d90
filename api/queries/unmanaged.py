"""The SQL of detached ("unmanaged") experiments and trials (api/unmanaged.py)."""

from __future__ import annotations

from typing import Any

import asyncpg

from api.queries import Conn
from common.states import EndState, ExperimentState, TrialState, sql_list

# An experiment's or trial's ended states (the same names for both), and those a script run
# again brings back.
_ENDED = sql_list((*EndState, TrialState.DELETED))
_RUN_AGAIN = sql_list((EndState.COMPLETED, EndState.ERROR))


async def fetch_experiment_by_external_id(conn: Conn, external_id: str
                                          ) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT id, owner, unmanaged FROM experiments WHERE external_id = $1", external_id)


async def fetch_experiment(conn: Conn, experiment_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id, owner, unmanaged, state FROM experiments WHERE id = $1",
                               experiment_id)


async def fetch_trial(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    """The trial with what decides who may drive it: its experiment's owner and kind."""
    return await conn.fetchrow(
        "SELECT t.id, t.experiment_id, t.state, t.run_id, t.external_id, e.owner, e.unmanaged"
        " FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id = $1", trial_id)


async def insert_trial(pool: asyncpg.Pool, experiment_id: int, hparams: dict[str, Any],
                       seed: int, external_id: str | None) -> int:
    """A new trial of the experiment (the next request id), or with `external_id` the one that
    has it already: the script run again (or a retried request) finds its trial."""
    async with pool.acquire() as conn, conn.transaction():
        # One trial created at a time per experiment: request ids stay unique.
        await conn.execute("SELECT id FROM experiments WHERE id = $1 FOR UPDATE", experiment_id)
        if external_id is not None:
            found: int | None = await conn.fetchval(
                "SELECT id FROM trials WHERE experiment_id = $1 AND external_id = $2",
                experiment_id, external_id)
            if found is not None:
                return found
        trial_id: int = await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, external_id)"
            f" SELECT $1, coalesce(max(request_id), 0) + 1, $2, $3, '{TrialState.ACTIVE}', $4"
            " FROM trials WHERE experiment_id = $1 RETURNING id",
            experiment_id, hparams, seed, external_id)
        return trial_id


async def start_run(conn: Conn, trial_id: int, resume: bool) -> asyncpg.Record:
    """The trial's next run: its id, and where it resumes (nothing without `resume`). A trial
    that had ended is active again."""
    return await conn.fetchrow(
        "UPDATE trials SET run_id = run_id + 1,"
        " steps_completed = CASE WHEN $2 THEN steps_completed ELSE 0 END,"
        f" state = CASE WHEN state IN ({_RUN_AGAIN}) THEN '{TrialState.ACTIVE}' ELSE state END,"
        " end_time = NULL"
        " WHERE id = $1 RETURNING run_id, steps_completed", trial_id, resume)


async def reopen_experiment(conn: Conn, experiment_id: int) -> None:
    """An experiment that had completed or failed is active again (a trial of it runs)."""
    await conn.execute(
        f"UPDATE experiments SET state = '{ExperimentState.ACTIVE}', end_time = NULL"
        f" WHERE id = $1 AND state IN ({_RUN_AGAIN})", experiment_id)


async def set_trial_state(conn: Conn, trial_id: int, state: str, terminal: bool) -> bool:
    """The state a detached run reports; False when the trial had ended already."""
    row = await conn.fetchval(
        "UPDATE trials SET state = $2, end_time = CASE WHEN $3 THEN now() ELSE end_time END"
        f" WHERE id = $1 AND state NOT IN ({_ENDED}) RETURNING id", trial_id, state, terminal)
    return row is not None


async def end_experiment_if_done(conn: Conn, experiment_id: int) -> str | None:
    """Once none of its trials runs, the experiment ends: COMPLETED when they all completed,
    else ERROR if one failed, else CANCELED. Answers the state it ended in."""
    state: str | None = await conn.fetchval(
        "UPDATE experiments e SET state = s.state, end_time = now() FROM ("
        f"  SELECT CASE WHEN bool_and(state = '{EndState.COMPLETED}') THEN '{EndState.COMPLETED}'"
        f"              WHEN bool_or(state = '{EndState.ERROR}') THEN '{EndState.ERROR}'"
        f"              ELSE '{EndState.CANCELED}' END AS state"
        "  FROM trials WHERE experiment_id = $1"
        f"  HAVING count(*) > 0 AND bool_and(state IN ({sql_list(EndState)}))) s"
        f" WHERE e.id = $1 AND e.state NOT IN ({_ENDED}) RETURNING e.state", experiment_id)
    return state


async def cancel_experiment(pool: asyncpg.Pool, experiment_id: int) -> None:
    """Its trials that have not ended, and the experiment, CANCELED."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            f"UPDATE trials SET state = '{TrialState.CANCELED}', end_time = now()"
            f" WHERE experiment_id = $1 AND state NOT IN ({_ENDED})", experiment_id)
        await conn.execute(
            f"UPDATE experiments SET state = '{ExperimentState.CANCELED}', end_time = now()"
            f" WHERE id = $1 AND state NOT IN ({_ENDED})", experiment_id)

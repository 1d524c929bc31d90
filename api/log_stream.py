"""Log lines as NDJSON (`{"result": log}` a line, as Determined streams them), maybe followed.

Following polls PostgreSQL for rows newer than the last one sent and stops once the owner (a
trial, an experiment or an interactive task) is terminal and nothing new arrived after that.

Lines arrive out of the order they were produced: an agent ships a run's output in batches
(and holds them while the master is away; runs on several agents ship apart), while the master
writes its own lines (a status, a restart) at once. `ordered_log_records` gives them in the order
they were produced: by timestamp, then by arrival.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import asyncpg
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from api.queries import experiments, logs, tasks, trials
from api.views import log_json
from common.states import TERMINAL_STATES, TaskState

POLL_SECONDS = 0.3
BATCH = 1000


def trial_ended(pool: asyncpg.Pool, trial_id: int) -> Callable[[], Awaitable[bool]]:
    """A follow's `is_done` for a trial: whether it is terminal, or gone (deleted meanwhile)."""
    async def ended() -> bool:
        state = await trials.fetch_trial_state(pool, trial_id)
        return state is None or state in TERMINAL_STATES

    return ended


def experiment_ended(pool: asyncpg.Pool, experiment_id: int) -> Callable[[], Awaitable[bool]]:
    """A follow's `is_done` for an experiment: whether it is terminal, or gone (deleted)."""
    async def ended() -> bool:
        state = await experiments.fetch_experiment_state(pool, experiment_id)
        return state is None or state in TERMINAL_STATES

    return ended


def task_ended(pool: asyncpg.Pool, task_id: str) -> Callable[[], Awaitable[bool]]:
    """A follow's `is_done` for an interactive task: whether it is TERMINATED, or gone."""
    async def ended() -> bool:
        row = await tasks.fetch_task_owner(pool, task_id)
        return row is None or row["state"] == TaskState.TERMINATED

    return ended


async def stream_logs(
    pool: asyncpg.Pool,
    of_owner: str,
    owner_id: int,
    *,
    follow: bool,
    is_done: Callable[[], Awaitable[bool]],
) -> AsyncIterator[bytes]:
    """Yield an owner's log lines as NDJSON, in the order they were produced: `of_owner` is
    `logs.OF_TRIAL` or `logs.OF_EXPERIMENT`, `owner_id` the trial's or the experiment's id."""
    async for log in ordered_log_records(pool, of_owner, owner_id, follow=follow,
                                         is_done=is_done):
        yield (json.dumps({"result": log}) + "\n").encode()


async def log_records(
    pool: asyncpg.Pool,
    of_owner: str,
    owner_id: int | str,
    *,
    follow: bool,
    is_done: Callable[[], Awaitable[bool]],
    after_id: int = 0,
    to_json: Callable[[asyncpg.Record], dict[str, Any]] = log_json,
    ordered: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Yield the log lines of the owner `of_owner` names (ids above `after_id`) as TrialLog JSON
    (or what `to_json` makes of a row), in id order (`ordered`: each batch in the order its
    lines were produced): NDJSON and Server-Sent Events both stream these."""
    last_id = after_id
    while True:
        done_before = await is_done() if follow else True
        while True:
            rows = await logs.fetch_log_batch(pool, of_owner, owner_id, last_id, BATCH)
            if rows:
                last_id = rows[-1]["id"]
            for row in production_order(rows) if ordered else rows:
                yield to_json(row)
            if len(rows) < BATCH:
                break
        if done_before:
            return
        await asyncio.sleep(POLL_SECONDS)


def production_order(rows: Iterable[asyncpg.Record]) -> list[asyncpg.Record]:
    """Rows in the order their lines were produced: timestamp (the agent's, when it read the
    line), then id (the order they arrived in, which keeps a batch's lines as read)."""
    return sorted(rows, key=lambda row: (row["timestamp"], row["id"]))


async def ordered_log_records(
    pool: asyncpg.Pool,
    of_owner: str,
    owner_id: int | str,
    *,
    follow: bool,
    is_done: Callable[[], Awaitable[bool]],
    to_json: Callable[[asyncpg.Record], dict[str, Any]] = log_json,
) -> AsyncIterator[dict[str, Any]]:
    """`log_records` in the order the lines were produced: every line already stored in that
    order; then, following, each batch of newer arrivals in that order (a line that arrives
    after later ones were sent cannot go back before them)."""
    upto = await logs.fetch_last_log_id(pool, of_owner, owner_id)
    after: tuple[Any, int] | None = None
    while True:
        rows = await logs.fetch_ordered_log_batch(pool, of_owner, owner_id, after, upto, BATCH)
        for row in rows:
            yield to_json(row)
        if len(rows) < BATCH:
            break
        after = (rows[-1]["timestamp"], rows[-1]["id"])
    if not follow:
        return
    async for log in log_records(pool, of_owner, owner_id, follow=True, is_done=is_done,
                                 after_id=upto, to_json=to_json, ordered=True):
        yield log


async def ndjson_lines(
    records: AsyncIterator[dict[str, Any]] | Iterable[dict[str, Any]],
    keeps: Callable[[dict[str, Any]], bool],
    limit: int,
) -> AsyncIterator[bytes]:
    """The records `keeps` keeps, at most `limit` (0: all), as NDJSON `{"result": log}` lines
    (the trial and task log routes' answers)."""
    sent = 0
    iterator = records if isinstance(records, AsyncIterator) else _aiter(records)
    async for log in iterator:
        if not keeps(log):
            continue
        yield (json.dumps({"result": log}) + "\n").encode()
        sent += 1
        if limit and sent >= limit:
            return


async def _aiter(records: Iterable[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for record in records:
        yield record


class LogFilter(BaseModel):
    """Determined's trial-log filters; each None means "any"."""

    levels: set[str] | None = None
    stdtypes: set[str] | None = None
    agent_ids: set[str] | None = None
    search_text: str | None = None
    after: str | None = None
    before: str | None = None

    def keeps(self, log: dict[str, Any]) -> bool:
        return (
            (self.levels is None or log["level"] in self.levels)
            and (self.stdtypes is None or log["stdtype"] in self.stdtypes)
            and (self.agent_ids is None or log["agentId"] in self.agent_ids)
            and (self.search_text is None or self.search_text in log["log"])
            and (self.after is None or log["timestamp"] > self.after)
            and (self.before is None or log["timestamp"] < self.before)
        )


async def trial_log_stream(pool: asyncpg.Pool, trial_id: int, keep: LogFilter, *, follow: bool,
                           limit: int, newest_first: bool) -> StreamingResponse:
    """A trial's log lines that `keep` keeps, as NDJSON, at most `limit` (0: all): newest first
    (`--tail`), or in the order they were produced, followed until the trial ends."""
    records: AsyncIterator[dict[str, Any]] | list[dict[str, Any]]
    if newest_first:
        rows = await logs.fetch_trial_logs_newest_first(pool, trial_id)
        records = [log_json(r) for r in rows]
    else:
        records = ordered_log_records(pool, logs.OF_TRIAL, trial_id, follow=follow,
                                      is_done=trial_ended(pool, trial_id))
    return StreamingResponse(ndjson_lines(records, keep.keeps, limit),
                             media_type="application/x-ndjson")

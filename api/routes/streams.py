"""Server-Sent Events for the dashboard's live pages: a trial's or an experiment's logs, an
experiment's state.

Browsers' EventSource sends no Authorization header, so these GET routes are read with the `auth`
cookie the dashboard sets at login (api/auth.py accepts it for GET). Each stream ends with an
`end` event once there is nothing more to say, so the page closes it instead of letting
EventSource reconnect.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from api import views
from api.deps import Pool
from api.errors import not_found
from api.log_stream import experiment_ended, log_records, trial_ended
from api.queries import experiments as experiment_queries
from api.queries import logs as log_queries
from api.queries import trials as trial_queries
from common.states import TERMINAL_STATES

router = APIRouter(prefix="/api/v1", tags=["streams"])

STATE_POLL_SECONDS = 1.0
PING_SECONDS = 15
# Fields that grow with the clock while a run goes on (views.py); a change in them alone is no
# change worth an event.
CLOCK_FIELDS = frozenset({"duration", "wallClockTime"})
MAX_STREAMED_TRIALS = 1000
# An experiment's log stream starts this many lines from its end (the dashboard keeps 5,000).
EXPERIMENT_LOG_TAIL = 5000


def _end() -> ServerSentEvent:
    return ServerSentEvent(data="{}", event="end")


def _log_events(pool: Pool, of_owner: str, owner_id: int, is_done: Callable[[], Awaitable[bool]],
                after_id: int) -> EventSourceResponse:
    async def events() -> AsyncIterator[ServerSentEvent]:
        logs = log_records(pool, of_owner, owner_id, follow=True, is_done=is_done,
                           after_id=after_id)
        async for log in logs:
            yield ServerSentEvent(data=json.dumps(log), event="log", id=str(log["id"]))
        yield _end()

    return EventSourceResponse(events(), ping=PING_SECONDS)


@router.get("/trials/{trial_id}/logs/stream")
async def stream_trial_logs(
    trial_id: int,
    pool: Pool,
    last_event_id: Annotated[int, Header(ge=0)] = 0,
) -> EventSourceResponse:
    """A trial's log lines as `log` events (id = the line's id, so a reconnect resumes after
    it), existing lines first, then new ones until the trial is terminal and drained."""
    await views.require_trial(pool, trial_id)

    return _log_events(pool, log_queries.OF_TRIAL, trial_id, trial_ended(pool, trial_id),
                       last_event_id)


@router.get("/experiments/{experiment_id}/logs/stream")
async def stream_experiment_logs(
    experiment_id: int,
    pool: Pool,
    last_event_id: Annotated[int, Header(ge=0)] = 0,
    tail: int = Query(EXPERIMENT_LOG_TAIL, ge=1, le=EXPERIMENT_LOG_TAIL),
) -> EventSourceResponse:
    """All the experiment's trials' log lines as `log` events (each names its `trialId`): the
    last `tail` lines first (an experiment of many trials has millions), then new ones until
    the experiment is terminal and drained; a reconnect resumes after its last event's id."""
    if await experiment_queries.fetch_experiment_row(pool, experiment_id) is None:
        raise not_found("experiment", experiment_id)
    if not last_event_id:
        last_event_id = await log_queries.fetch_experiment_tail_start(pool, experiment_id, tail)
    return _log_events(pool, log_queries.OF_EXPERIMENT, experiment_id,
                       experiment_ended(pool, experiment_id), last_event_id)


def _fingerprint(summary: dict[str, Any]) -> str:
    def steady(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in CLOCK_FIELDS}

    return json.dumps(
        [steady(summary["experiment"]), [steady(t) for t in summary["trials"]]], sort_keys=True
    )


@dataclass(frozen=True)
class TrialPage:
    """Which trials an experiment's stream carries: one page, as GET .../trials would answer."""

    sort_by: str = "SORT_BY_ID"
    order_desc: bool = False
    limit: int = 100
    offset: int = 0
    states: list[str] | None = None
    filters: list[trial_queries.TrialFilter] | None = None


async def _experiment_summary(pool: Pool, experiment_id: int,
                              page: TrialPage) -> dict[str, Any] | None:
    row = await experiment_queries.fetch_experiment_row(pool, experiment_id)
    if row is None:
        return None
    rows, total = await trial_queries.fetch_trial_page(
        pool, experiment_id, states=page.states, filters=page.filters, sort_by=page.sort_by,
        order_desc=page.order_desc, limit=page.limit, offset=page.offset)
    trials = [views.trial_json(r) for r in rows]
    return {"experiment": views.experiment_json(row), "trials": trials,
            "pagination": views.pagination(page.offset, page.limit, len(trials), total)}


@router.get("/experiments/{experiment_id}/stream")
async def stream_experiment(
    experiment_id: int,
    pool: Pool,
    limit: int = Query(100, ge=1, le=MAX_STREAMED_TRIALS),
    offset: int = Query(0, ge=0),
    sortBy: str = "SORT_BY_ID",
    orderBy: views.OrderBy = "ORDER_BY_ASC",
    states: views.ListQuery = None,
    filter: views.ListQuery = None,  # noqa: A002 (the query's name)
) -> EventSourceResponse:
    """`experiment` events holding `{"experiment", "trials", "pagination"}` whenever either
    changed (polled from PostgreSQL about once a second), ending after the terminal state is
    sent. The trials are one page of them (`limit`, `offset`, `sortBy`, `orderBy`, `states`,
    `filter` as for GET /experiments/{id}/trials), so an experiment of 10,000 trials streams a
    page, not all."""
    views.check_trial_sort(sortBy)
    page = TrialPage(sort_by=sortBy, order_desc=orderBy == "ORDER_BY_DESC", limit=limit,
                     offset=offset, states=views.trial_states(states),
                     filters=views.trial_filters(filter))
    if await _experiment_summary(pool, experiment_id, page) is None:
        raise not_found("experiment", experiment_id)

    async def events() -> AsyncIterator[ServerSentEvent]:
        sent: str | None = None
        while True:
            summary = await _experiment_summary(pool, experiment_id, page)
            if summary is None:  # deleted while watched
                break
            fingerprint = _fingerprint(summary)
            if fingerprint != sent:
                sent = fingerprint
                yield ServerSentEvent(data=json.dumps(summary), event="experiment")
            if summary["experiment"]["state"].removeprefix("STATE_") in TERMINAL_STATES:
                break
            await asyncio.sleep(STATE_POLL_SECONDS)
        yield _end()

    return EventSourceResponse(events(), ping=PING_SECONDS)

"""The cluster: master info and health, the master's config and logs (admins), and the message
shown to every user (agents are in api/routes/agents.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import AwareDatetime, BaseModel, Field

from api import auth, go_duration, master_config, master_logs
from api.auth import CurrentPrincipal
from api.deps import AppSettings, Pool
from api.errors import ApiError
from api.queries import cluster as cluster_queries
from api.schemas import Empty, answers
from api.schemas.cluster import (
    ClusterMessageAnswer,
    DeterminedInfo,
    Health,
    MasterConfig,
    MasterInfo,
)

router = APIRouter(tags=["cluster"])
log = logging.getLogger(__name__)

VERSION = "0.1.0"
# The Determined release whose REST API Epochal speaks. `det` compares its own version with the
# one `GET /info` answers before every command and warns on any difference.
DETERMINED_API_VERSION = "0.38.1"


@router.get("/health", **answers(Health))
async def health(pool: Pool) -> dict[str, bool]:
    await cluster_queries.ping(pool)
    return {"ok": True}


def _master_fields(settings: AppSettings) -> dict[str, Any]:
    return {
        "masterId": settings.cluster_id,
        "clusterId": settings.cluster_id,
        "clusterName": settings.cluster_name,
        "telemetryEnabled": False,
        "hasCustomLogo": False,
        "strictJobQueueControl": False,
        "rbacEnabled": False,
        "userManagementEnabled": True,
        "product": "PRODUCT_UNSPECIFIED",
        "featureSwitches": [],
        "ssoProviders": [],
    }


@router.get("/api/v1/master", **answers(MasterInfo))
async def master_info(settings: AppSettings, pool: Pool) -> dict[str, Any]:
    """Determined's v1GetMasterResponse (`det master info`); `version` is Epochal's. As on
    Determined, it carries the cluster message being shown."""
    shown = await cluster_queries.fetch_cluster_message(pool, shown_now=True)
    return {"version": VERSION, **_master_fields(settings),
            "clusterMessage": _message_json(shown)}


@router.get("/info", **answers(DeterminedInfo))
async def determined_info(settings: AppSettings) -> dict[str, Any]:
    """What `det` asks first (unauthenticated), in Determined's snake_case: the version it
    compares is the Determined release Epochal's API matches."""
    return {
        "version": DETERMINED_API_VERSION,
        "epochal_version": VERSION,
        "master_id": settings.cluster_id,
        "cluster_id": settings.cluster_id,
        "cluster_name": settings.cluster_name,
        "telemetry": {"enabled": False},
    }


@router.get("/api/v1/master/config", **answers(MasterConfig))
async def get_master_config(settings: AppSettings) -> dict[str, Any]:
    """Determined's GetMasterConfig (`det master config`): admins only (the route's rule)."""
    return {"config": master_config.printable(
        settings, token_default_days=auth.ACCESS_TOKEN_DEFAULT_DAYS,
        token_max_days=auth.ACCESS_TOKEN_MAX_DAYS)}


# -- the master's logs -------------------------------------------------------------------------

FOLLOW_POLL_SECONDS = 0.5


async def _master_log_buffer() -> master_logs.MasterLogBuffer:
    return master_logs.attach()


MasterLogs = Annotated[master_logs.MasterLogBuffer, Depends(_master_log_buffer)]


def _log_line(entry: master_logs.Entry) -> bytes:
    when = datetime.fromtimestamp(entry.created, UTC).isoformat().replace("+00:00", "Z")
    return (json.dumps({"result": {"logEntry": {
        "id": entry.id, "level": master_logs.level_name(entry.levelno),
        "message": entry.message, "timestamp": when}}}) + "\n").encode()


@router.get("/api/v1/master/logs", response_class=StreamingResponse)
async def get_master_logs(
    request: Request,
    logs: MasterLogs,
    follow: bool = False,
    limit: int = Query(0, ge=0, le=master_logs.MAX_RECORDS,
                       description="At most this many (0: all kept)"),
    offset: int = Query(0, ge=-(2**31), le=2**31 - 1,
                        description="Skip this many; negative: only the last -offset"),
) -> StreamingResponse:
    """Determined's MasterLogs (`det master logs [-f] [--tail N]`): NDJSON
    `{"result": {"logEntry": LogEntry}}` lines of the records the master keeps in memory
    (api/master_logs.py); followed, until the caller hangs up. Admins only (the route's rule)."""
    if follow and limit:
        raise ApiError(400, "bad limit", ["limit: cannot be given when following"])
    kept = logs.entries()
    start = max(len(kept) + offset, 0) if offset < 0 else offset
    first = kept[start:start + limit] if limit else kept[start:]

    async def lines() -> AsyncIterator[bytes]:
        last = kept[-1].id if kept else -1
        for entry in first:
            yield _log_line(entry)
        while follow and not await request.is_disconnected():
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            for entry in logs.entries(after_id=last):
                last = entry.id
                yield _log_line(entry)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


# -- the cluster-wide message ------------------------------------------------------------------

MAX_MESSAGE_CHARACTERS = 250  # Determined's bound
LONGEST_MESSAGE = timedelta(days=3650)


def _rfc3339(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _message_json(row: asyncpg.Record | None) -> dict[str, Any] | None:
    """Determined's v1ClusterMessage."""
    if row is None:
        return None
    return {"message": row["message"], "startTime": _rfc3339(row["start_time"]),
            "endTime": _rfc3339(row["end_time"]), "createdTime": _rfc3339(row["created_at"])}


@router.get("/api/v1/master/cluster_message", **answers(ClusterMessageAnswer))
async def get_cluster_message(principal: CurrentPrincipal, pool: Pool) -> dict[str, Any]:
    """Determined's GetClusterMessage (`det master cluster-message get`): the message not ended
    yet. Admins see one set to start later too; users only the one shown now (Determined
    answers admins only; the message shown is in every `GET /api/v1/master` anyway)."""
    admin = principal.kind == "user" and principal.admin
    row = await cluster_queries.fetch_cluster_message(pool, shown_now=not admin)
    return {"clusterMessage": _message_json(row)}


class SetClusterMessageRequest(BaseModel):
    """Determined's v1SetClusterMessageRequest."""

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARACTERS)
    startTime: AwareDatetime
    endTime: AwareDatetime | None = None
    duration: str | None = Field(None, max_length=go_duration.MAX_TEXT,
                                 description="A Go duration (24h, 90m); not with endTime")


@router.put("/api/v1/master/cluster_message", **answers(Empty))
async def set_cluster_message(
    body: SetClusterMessageRequest, principal: CurrentPrincipal, pool: Pool
) -> dict[str, Any]:
    """Determined's SetClusterMessage (`det master cluster-message set -m TEXT [-s START]
    [-e END | -d DURATION]`): replaces any other. Admins only (the route's rule)."""
    end = body.endTime
    if body.duration is not None:
        if end is not None:
            raise ApiError(400, "bad duration", [
                "duration: give either endTime or duration, not both"])
        lasting = go_duration.parse("duration", body.duration, longest=LONGEST_MESSAGE)
        try:
            end = body.startTime + lasting
        except OverflowError:
            raise ApiError(400, "bad duration", [
                "duration: ends past the last date there is"]) from None
    if end is not None and end <= body.startTime:
        raise ApiError(400, "bad endTime", ["endTime: must be after startTime"])
    if end is not None and end <= datetime.now(UTC):
        raise ApiError(400, "bad endTime", ["endTime: must be in the future"])
    async with pool.acquire() as conn, conn.transaction():
        await cluster_queries.set_cluster_message(
            conn, message=body.message, created_by=principal.user_id, start=body.startTime,
            end=end)
    log.info("%s set the cluster message (%d characters, from %s until %s)",
             principal.describe(), len(body.message), _rfc3339(body.startTime),
             _rfc3339(end) or "cleared")
    return {}


@router.delete("/api/v1/master/cluster_message", **answers(Empty))
async def clear_cluster_message(principal: CurrentPrincipal, pool: Pool) -> dict[str, Any]:
    """Determined's DeleteClusterMessage (`det master cluster-message clear`): admins only."""
    await cluster_queries.end_cluster_messages(pool)
    log.info("%s cleared the cluster message", principal.describe())
    return {}

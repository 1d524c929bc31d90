"""The master's proxy to interactive tasks: `/proxy/<taskId>/...` reaches the service a notebook,
TensorBoard or shell runs on its agent, so users need the master's address alone.

HTTP and WebSockets go to `http://<proxy_address>/proxy/<taskId>/...` (the services are started
with that base path) with the caller's own Host, so the service's origin checks and absolute
redirects see the master. The task never sees the user's credentials: the Authorization header
and the dashboard's `auth` cookie are dropped, and a notebook gets Jupyter's token instead.

Authentication is the API's (a Bearer token or the dashboard's cookie), resolved here rather than
by `api.auth.authorize`, which reads the cookie only for reads: Jupyter's page POSTs with it
(Jupyter checks its own XSRF cookie, and the cookie is SameSite=Strict); a write or WebSocket
logged in by the cookie must come from the master's own pages. Only the task's owner and admins
pass.

A shell is a TCP tunnel instead: a WebSocket carries its sshd's bytes as binary messages, as
Determined's master does for `python -m determined.cli.tunnel`, which `det shell open` runs as
ssh's ProxyCommand without any credential; so, as there, a shell's tunnel is open without a
login (its sshd admits only the task's key) and checks one when it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import asyncpg
import httpx
from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection
from starlette.types import Scope
from starlette.websockets import WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.typing import Subprotocol

from api.auth import (
    AUTH_COOKIE,
    DETERMINED_TASK_TOKEN_HEADER,
    READ_METHODS,
    Principal,
    _resolve,
)
from api.body_limit import PROXY_LIMIT
from api.errors import ApiError, not_found
from api.queries import tasks as task_queries
from common.states import TaskState

log = logging.getLogger(__name__)

GiB = 1024**3
MESSAGE_LIMIT = 128 * 1024**2  # one WebSocket message from a task (a notebook's large output)
CONNECT_TIMEOUT = 10.0  # reaching the task's service; streams themselves are not timed
TCP_CHUNK = 64 * 1024
# A connection's traffic marks its task active at most this often (touch_task's own period).
ACTIVITY_INTERVAL = 5.0
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
USER_CREDENTIALS = frozenset({"authorization", DETERMINED_TASK_TOKEN_HEADER})
# The WebSocket library writes its own handshake (and Host, from the URI).
WEBSOCKET_HANDSHAKE = frozenset({"host", "sec-websocket-key", "sec-websocket-version",
                                 "sec-websocket-extensions", "sec-websocket-protocol",
                                 "sec-websocket-accept"})
SERVER_WRITTEN = frozenset({"date", "server"})  # uvicorn adds its own
# A Host header fit to be a URI's authority (a name or an IPv6 address, and a port).
HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]+)?|\[[0-9A-Fa-f:.]+\](:[0-9]+)?")


@dataclass(frozen=True)
class Target:
    """A ready task's service the caller may reach."""

    task_id: str
    task_type: str
    address: str  # host:port on its agent
    secret: str  # Jupyter's token, sent only by the proxy

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(f"//{self.address}")
        if parts.hostname is None or parts.port is None:
            raise ApiError(502, f"task {self.task_id} has no usable address ({self.address!r})")
        return parts.hostname, parts.port


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT, pool=CONNECT_TIMEOUT)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
        app.state.proxy_client = client
        yield


router = APIRouter(tags=["proxy"], lifespan=_lifespan)


def _credential(connection: HTTPConnection) -> str | None:
    """The caller's token: `Authorization: Bearer`, else the dashboard's cookie. Another scheme
    (Jupyter's page sends its own `token`) is not Epochal's login and is dropped like it."""
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    token = connection.cookies.get(AUTH_COOKIE) or None
    if token is not None and connection.scope.get("method") not in READ_METHODS:
        origin = connection.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != connection.headers.get("host"):
            raise ApiError(403, f"a page of {origin} may not use the dashboard's login to "
                           "write or open a WebSocket: only the master's own pages may")
    return token


def _require_reach(principal: Principal, row: asyncpg.Record, task_id: str) -> None:
    if principal.kind != "user":
        raise ApiError(403, f"{principal.describe()} may not reach task {task_id}: "
                       "log in as its owner")
    if not principal.admin and principal.user_id != row["owner_id"]:
        raise ApiError(403, f"user {principal.username} may not reach task {task_id}, "
                       f"which belongs to {row['username']}")


async def _target(connection: HTTPConnection, task_id: str, *, tunnel: bool) -> Target:
    """The task's service, when the caller may reach it now; else the ApiError saying why."""
    state = connection.app.state
    row = await task_queries.fetch_proxy_target(state.pool, task_id)
    token = _credential(connection)
    principal = await _resolve(token, state.pool, state.settings) if token else None
    open_tunnel = tunnel and row is not None and row["task_type"] == "SHELL"
    if principal is None and not open_tunnel:
        raise ApiError(401, "not logged in: send 'Authorization: Bearer <token>' or log in to "
                       "the dashboard (`epochal user login`, POST /api/v1/auth/login)")
    if row is None:
        raise not_found("task", task_id)
    if principal is not None:
        _require_reach(principal, row, task_id)
    if row["state"] == TaskState.TERMINATED:
        raise ApiError(410, f"task {task_id} has ended: its service is gone")
    if row["task_type"] == "COMMAND":
        raise ApiError(404, f"task {task_id} is a command: it serves nothing through the proxy")
    if not row["ready"] or not row["proxy_address"]:
        raise ApiError(503, f"task {task_id} is not ready yet (state {row['state']})")
    return Target(task_id, row["task_type"], row["proxy_address"], row["secret"])


def _without_auth_cookie(header: str) -> str:
    kept = [part.strip() for part in header.split(";")
            if part.strip() and part.split("=", 1)[0].strip() != AUTH_COOKIE]
    return "; ".join(kept)


def _forwarded_headers(connection: HTTPConnection, target: Target) -> list[tuple[str, str]]:
    """The caller's headers as the task gets them: no hop-by-hop ones, no user credential;
    a notebook's own token instead."""
    named = {name.strip().lower() for name in connection.headers.get("connection", "").split(",")}
    dropped = HOP_BY_HOP | USER_CREDENTIALS | named
    if connection.scope["type"] == "websocket":
        dropped |= WEBSOCKET_HANDSHAKE
    headers = []
    for name, value in connection.headers.items():
        lowered = name.lower()
        if lowered in dropped:
            continue
        if lowered == "cookie":
            value = _without_auth_cookie(value)
            if not value:
                continue
        headers.append((name, value))
    if target.task_type == "NOTEBOOK":
        headers.append(("Authorization", f"token {target.secret}"))
    return headers


def _upstream_url(scheme: str, netloc: str, scope: Scope) -> str:
    """The same path (as the caller encoded it) and query at `netloc`."""
    path = scope.get("raw_path") or quote(scope["path"]).encode()
    query = scope.get("query_string", b"")
    url = f"{scheme}://{netloc}{path.decode('latin-1')}"
    return f"{url}?{query.decode('latin-1')}" if query else url


class _Activity:
    """Marks a task active for a connection's traffic, at most every ACTIVITY_INTERVAL seconds
    (touch_task writes no more often anyway; this spares the database a statement per message).
    A database that does not answer must not cut a user's session: that is logged, not raised."""

    def __init__(self, pool: asyncpg.Pool, task_id: str) -> None:
        self.pool, self.task_id = pool, task_id
        self._last = -math.inf

    async def mark(self) -> None:
        now = time.monotonic()
        if now - self._last < ACTIVITY_INTERVAL:
            return
        self._last = now
        try:
            await task_queries.touch_task(self.pool, self.task_id)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("task %s: could not record its activity: %s", self.task_id, exc)


# HTTP


async def _request_body(request: Request) -> AsyncIterator[bytes]:
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > PROXY_LIMIT:
            raise ApiError(413, "request body too large: at most "
                           f"{PROXY_LIMIT // GiB} GiB go through the proxy")
        if chunk:
            yield chunk


async def _answer_body(answer: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    finally:
        await answer.aclose()


@router.api_route("/proxy/{task_id}/{path:path}", methods=METHODS, include_in_schema=False)
async def proxy_http(task_id: str, request: Request) -> Response:
    target = await _target(request, task_id, tunnel=False)
    if target.task_type == "SHELL":
        raise ApiError(400, f"task {task_id} is a shell: it is reached through its SSH tunnel "
                       "(a WebSocket, `det shell open`), not HTTP")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > PROXY_LIMIT:
        raise ApiError(413, "request body too large: at most "
                       f"{PROXY_LIMIT // GiB} GiB go through the proxy")
    has_body = bool(declared) or "transfer-encoding" in request.headers
    await task_queries.touch_task(request.app.state.pool, task_id)
    client: httpx.AsyncClient = request.app.state.proxy_client
    outgoing = client.build_request(
        request.method, _upstream_url("http", target.address, request.scope),
        headers=_forwarded_headers(request, target),
        content=_request_body(request) if has_body else None,
    )
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.TimeoutException:
        raise ApiError(504, f"task {task_id} did not answer at {target.address} within "
                       f"{CONNECT_TIMEOUT:g} s") from None
    except httpx.TransportError as exc:
        raise ApiError(502, f"task {task_id} does not answer at {target.address}: "
                       f"{exc or type(exc).__name__}") from None
    named = {name.strip().lower() for name in answer.headers.get("connection", "").split(",")}
    dropped = HOP_BY_HOP | SERVER_WRITTEN | named
    response = StreamingResponse(_answer_body(answer), status_code=answer.status_code,
                                 background=BackgroundTask(answer.aclose))
    response.raw_headers = [(name, value) for name, value in answer.headers.raw
                            if name.decode("latin-1").lower() not in dropped]
    return response


# WebSocket


@router.websocket("/proxy/{task_id}/{path:path}")
async def proxy_websocket(websocket: WebSocket, task_id: str) -> None:
    try:
        target = await _target(websocket, task_id, tunnel=True)
        if target.task_type == "SHELL":
            await _tunnel_tcp(websocket, target)
        else:
            await _relay_websocket(websocket, target)
    except ApiError as exc:
        await _deny(websocket, exc)


async def _deny(websocket: WebSocket, error: ApiError) -> None:
    """Refuse the handshake with the API's error JSON (a close frame where the server cannot
    answer a handshake with an HTTP response)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = {"message": error.message, "details": error.details}
        await websocket.send_denial_response(JSONResponse(body, status_code=error.status))
    else:
        await websocket.close(code=1008, reason=error.message[:120])


async def _relay_websocket(websocket: WebSocket, target: Target) -> None:
    """Raises ApiError only before the caller's handshake is accepted."""
    upstream = await _open_websocket(websocket, target)
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        activity = _Activity(websocket.app.state.pool, target.task_id)
        await activity.mark()
        await _first_to_end(_caller_to_task(websocket, upstream, activity),
                            _task_to_caller(upstream, websocket, activity))


async def _open_websocket(websocket: WebSocket, target: Target) -> ClientConnection:
    host, port = target.host_port
    offered = websocket.headers.get("sec-websocket-protocol", "")
    subprotocols = [Subprotocol(p.strip()) for p in offered.split(",") if p.strip()]
    # The URI names the caller's Host (what the service sees); host/port are where it listens.
    named = websocket.headers.get("host", "")
    uri = _upstream_url("ws", named if HOST.fullmatch(named) else target.address,
                        websocket.scope)
    try:
        return await connect(
            uri, host=host, port=port, additional_headers=_forwarded_headers(websocket, target),
            subprotocols=subprotocols or None, user_agent_header=None, compression=None,
            proxy=None, open_timeout=CONNECT_TIMEOUT, max_size=MESSAGE_LIMIT)
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise ApiError(status, f"task {target.task_id} refused the WebSocket ({status} "
                       f"{exc.response.reason_phrase})") from None
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise ApiError(502, f"task {target.task_id} does not answer at {target.address}: "
                       f"{exc or type(exc).__name__}") from None


async def _caller_to_task(websocket: WebSocket, upstream: ClientConnection,
                          activity: _Activity) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            await upstream.close(_sendable(message.get("code")), message.get("reason") or "")
            return
        await activity.mark()
        data = message.get("bytes")
        await upstream.send(data if data is not None else message.get("text") or "")


async def _task_to_caller(upstream: ClientConnection, websocket: WebSocket,
                          activity: _Activity) -> None:
    with contextlib.suppress(ConnectionClosed):  # the task's side broke: say so below
        async for data in upstream:
            await activity.mark()
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)
    await _close(websocket, _sendable(upstream.close_code), upstream.close_reason or "")


async def _tunnel_tcp(websocket: WebSocket, target: Target) -> None:
    """A shell's sshd, byte for byte. Raises ApiError only before the handshake is accepted,
    as Determined's master dials the service before it upgrades the connection."""
    host, port = target.host_port
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise ApiError(502, f"task {target.task_id}'s sshd does not answer at "
                       f"{target.address}: {exc or type(exc).__name__}") from None
    try:
        await websocket.accept()
        activity = _Activity(websocket.app.state.pool, target.task_id)
        await activity.mark()
        await _first_to_end(_caller_to_socket(websocket, writer, activity),
                            _socket_to_caller(reader, websocket, activity))
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _caller_to_socket(websocket: WebSocket, writer: asyncio.StreamWriter,
                            activity: _Activity) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes")
        if data is None:
            await _close(websocket, 1003, "a shell's tunnel carries binary messages only")
            return
        await activity.mark()
        writer.write(data)
        await writer.drain()


async def _socket_to_caller(reader: asyncio.StreamReader, websocket: WebSocket,
                            activity: _Activity) -> None:
    while data := await reader.read(TCP_CHUNK):
        await activity.mark()
        await websocket.send_bytes(data)
    await _close(websocket, 1000, "")


# Either side going away ends a relay; these are how they go.
_ENDS = (WebSocketDisconnect, ConnectionClosed, OSError)


async def _first_to_end(*pumps: Coroutine[Any, Any, None]) -> None:
    """Run both directions of a relay until one of them ends, then stop the other."""
    tasks = [asyncio.ensure_future(pump) for pump in pumps]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        error = task.exception()
        if error is not None and not isinstance(error, _ENDS):
            raise error


def _sendable(code: int | None) -> int:
    """A close code that may go on the wire: 1005 (none given) is a normal close; 1006 and
    1015 (the connection broke) say the other side failed."""
    if code is None or code == 1005:
        return 1000
    return code if 1000 <= code < 5000 and code not in (1004, 1006, 1015) else 1011


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    if websocket.application_state != WebSocketState.CONNECTED:
        return
    with contextlib.suppress(*_ENDS, RuntimeError):
        await websocket.close(code, reason.encode()[:120].decode(errors="ignore"))

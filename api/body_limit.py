"""Refuse request bodies over a size limit with 413, before they are read into memory.

Experiment creation carries the model definition (up to 96 MiB of files, base64 in JSON), and an
interactive task's launch its context files, so they get a larger limit than the API's other
routes; the proxy to interactive tasks passes uploads to a notebook (api/routes/proxy.py).
A declared Content-Length is checked at once; a body sent without one is counted as it
streams in, and the route's body parsing stops with the 413.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body

MiB = 1024 * 1024
DEFAULT_LIMIT = 16 * MiB
# 96 MiB of files grow by a third in base64, plus the JSON around them.
EXPERIMENT_CREATE_LIMIT = 136 * MiB
PROXY_LIMIT = 1024 * MiB
# A history import's page (api/routes/imports.py): 500 objects, 20,000 metric reports or log
# lines; a page of experiments carries their model definitions, up to a submission's each.
IMPORT_LIMIT = 64 * MiB
IMPORT_PREFIX = "/api/v1/imports/"
# The routes that take files: experiments, and Determined's interactive tasks (with --context).
WITH_FILES = frozenset(f"/api/v1/{kind}" for kind in (
    "experiments", "commands", "notebooks", "shells", "tensorboards"))


def limit_for(method: str, path: str) -> int:
    if method == "POST" and path.rstrip("/") in WITH_FILES:
        return EXPERIMENT_CREATE_LIMIT
    if method == "POST" and path.startswith(IMPORT_PREFIX):
        return (EXPERIMENT_CREATE_LIMIT if path.rstrip("/").endswith("/experiments")
                else IMPORT_LIMIT)
    if path.startswith("/proxy/"):
        return PROXY_LIMIT
    return DEFAULT_LIMIT


class BodyTooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing passes it on to the error handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body too large: at most {limit // MiB} MiB accepted here")


class BodySizeLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"])
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(send, BodyTooLarge(limit))
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counting_receive, send)


async def _refuse(send: Send, error: BodyTooLarge) -> None:
    body = error_body(error.detail)
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

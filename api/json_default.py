"""Treat a request body sent without a Content-Type as JSON.

Determined's client (`det`, `determined.core`) posts its JSON as a plain string without a
Content-Type header, which grpc-gateway accepts; FastAPI would not parse such a body at all.
Its detached runs' log shipper posts so to `/task-logs`, outside /api/.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class DefaultJsonContentType:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["path"].startswith("/api/")
                                        or scope["path"] == "/task-logs"):
            headers = scope["headers"]
            if not any(name == b"content-type" for name, _ in headers):
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)

"""Errors as JSON a person can act on: `{"message": ..., "details": [...]}`."""

from __future__ import annotations

import json
from collections.abc import Iterable

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.errors import (
    Conflict,
    Invalid,
    NotFound,
    ServiceError,
    StorageFailed,
    Unavailable,
)


class ApiError(Exception):
    def __init__(self, status: int, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


def error_body(message: str, details: list[str] | None = None) -> bytes:
    """The error JSON as bytes, for code below FastAPI (ASGI middleware)."""
    return json.dumps({"message": message, "details": details or []}).encode()


def require_choice(field: str, value: str, choices: Iterable[str]) -> None:
    """A 400 naming `field` unless `value` is one of `choices` (Determined's enum names)."""
    names = list(choices)
    if value not in names:
        raise ApiError(400, f"bad {field}", [f"{field}: one of {', '.join(names)}, got {value!r}"])


def not_found(kind: str, ident: object) -> ApiError:
    return ApiError(404, f"{kind} {ident} not found")


# The status each refusal of a service (services/errors.py) answers with.
SERVICE_STATUSES: dict[type[ServiceError], int] = {
    Invalid: 400, NotFound: 404, Conflict: 409, StorageFailed: 502, Unavailable: 503,
}


def service_status(exc: ServiceError) -> int:
    return next(status for kind, status in SERVICE_STATUSES.items() if isinstance(exc, kind))


def _field_path(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


INT32 = range(-(2**31), 2**31)

# Determined's API route families Epochal does not serve, by the path's first segment under
# /api/v1 (or first two): a call to one answers 501 naming the feature, not a bare 404.
UNSERVED_FEATURES = {
    "generic-tasks": "generic tasks are not served by Epochal",
    "tasks/count": "task counts are not served by Epochal (interactive tasks)",
    "webhooks": "webhooks are not served by Epochal",
    "roles": "role-based access control (RBAC) is not served by Epochal",
    "rbac": "role-based access control (RBAC) is not served by Epochal",
    "permissions": "role-based access control (RBAC) is not served by Epochal",
    "groups": "user groups are not served by Epochal (RBAC)",
    "oauth": "OAuth clients are not served by Epochal",
    "config-policies": "config policies are not served by Epochal",
    "namespace-bindings": "Kubernetes namespace bindings are not served by Epochal",
    "runs": "runs (the flat-runs view) are not served by Epochal",
    "searches": "searches (the flat-runs view) are not served by Epochal",
    "users/setting": "user web settings are not served by Epochal",
    "trials/profiler": "the profiler is not served by Epochal",
    "checkpoints/rm": "checkpoint storage removal is not served by Epochal",
    "webui": "the Determined web UI is not served by Epochal (see the dashboard at /)",
}


# Determined's REST API, and its few routes outside /api/v1 (`det resources raw|aggregated|
# allocations` ask /resources/allocation/..., served by api/routes/resources.py;
# `det experiment set gc-policy` asks `experiments/{id}/preview_gc`).
DETERMINED_PREFIXES = ("/api/v1/", "/resources/")


# Calls Determined's client makes to a path that a route for another method matches (`GET
# /checkpoints/{uuid}`): a 501 naming the feature, not a 405. A path Epochal serves for another
# method (`PATCH /master/config`) stays a 405 that names the method.
UNSERVED_CALLS = {
    ("POST", "/api/v1/checkpoints/rm"): UNSERVED_FEATURES["checkpoints/rm"],
}


def unserved_feature(path: str, method: str | None = None) -> str:
    """What a Determined path no route serves belongs to, as a sentence for a 501; `method`
    when the path exists for other methods only."""
    parts = [p for p in path.removeprefix("/api/v1/").split("/") if p]
    for key in ("/".join(parts[:2]), "/".join(parts[:1])):
        if key in UNSERVED_FEATURES:
            return UNSERVED_FEATURES[key]
    verb = f"{method} " if method else ""
    if len(parts) >= 3 and method is None:  # e.g. experiments/{id}/tensorboard-files
        return f"{parts[0]}/{{id}}/{parts[2]} is not served by Epochal"
    return f"{verb}{path} is not served by Epochal"


def _unstorable_params(request: Request) -> list[str]:
    """Path and query parameters PostgreSQL cannot take: ids past its integer columns, NULs."""
    found = []
    params = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in params:
        text = str(value)
        if text.lstrip("-").isdigit() and int(text) not in INT32:
            found.append(f"{name}: {text} is out of range (at most {INT32.stop - 1})")
        elif "\x00" in text:
            found.append(f"{name}: must not contain NUL characters")
    return found


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(asyncpg.DataError)
    async def _data_error(request: Request, exc: asyncpg.DataError) -> JSONResponse:
        # A value the database cannot hold (an id past its integer range, a NUL in text) is
        # the request's fault, not the server's.
        details = _unstorable_params(request) or [str(exc).split("\n")[0]]
        return JSONResponse(
            {"message": "invalid request: a value cannot be stored", "details": details},
            status_code=400,
        )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            {"message": exc.message, "details": exc.details}, status_code=exc.status
        )

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(
            {"message": exc.message, "details": exc.details}, status_code=service_status(exc)
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [f"{_field_path(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        return JSONResponse({"message": "invalid request", "details": details}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.url.path
        if exc.status_code in (404, 405) and (
                path.startswith(DETERMINED_PREFIXES) or path.endswith("/preview_gc")):
            # No route: a Determined feature Epochal does not have (501). A route that exists
            # for other methods only stays a 405, naming the method: the server did not fail.
            # `error.error` is where Determined's client looks for a non-404 error's message.
            unserved_call = UNSERVED_CALLS.get((request.method, path))
            wrong_method = exc.status_code == 405 and unserved_call is None
            message = unserved_call or unserved_feature(
                path, request.method if wrong_method else None)
            return JSONResponse(
                {"message": message, "details": [], "error": {"code": 12, "error": message}},
                status_code=405 if wrong_method else 501,
                headers=exc.headers,
            )
        return JSONResponse(
            {"message": str(exc.detail), "details": []}, status_code=exc.status_code
        )

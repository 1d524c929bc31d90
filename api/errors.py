"""Errors as JSON a person can act on: `{"message": ..., "details": [...]}`."""

from __future__ import annotations

import json
from collections.abc import Iterable

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


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


def _field_path(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


INT32 = range(-(2**31), 2**31)


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

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [f"{_field_path(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        return JSONResponse({"message": "invalid request", "details": details}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"message": str(exc.detail), "details": []}, status_code=exc.status_code
        )

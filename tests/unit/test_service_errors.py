"""Every refusal a service raises (services/errors.py) answers with its status and the error JSON,
through the API's one handler (api/errors.py), not a try/except in each route."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from api.errors import SERVICE_STATUSES, install_error_handlers
from services import errors
from services.errors import ServiceError

EXPECTED = {errors.Invalid: 400, errors.NotFound: 404, errors.Conflict: 409,
            errors.StorageFailed: 502, errors.Unavailable: 503}


def test_every_service_error_has_a_status() -> None:
    kinds = {k for k in vars(errors).values()
             if isinstance(k, type) and issubclass(k, ServiceError) and k is not ServiceError}
    assert SERVICE_STATUSES == EXPECTED
    assert kinds == set(EXPECTED)


@pytest.mark.parametrize(("kind", "status"), list(EXPECTED.items()))
async def test_a_route_that_lets_one_through_answers_its_status(
        kind: type[ServiceError], status: int) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/refused")
    async def refused() -> None:
        raise kind("not now", ["field: why"])

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.get("/refused")
    assert answer.status_code == status
    assert answer.json() == {"message": "not now", "details": ["field: why"]}


def test_not_found_names_what_is_missing() -> None:
    missing = errors.not_found("experiment", 7)
    assert isinstance(missing, errors.NotFound)
    assert (missing.message, missing.details) == ("experiment 7 not found", [])

"""Temporal's codec server protocol, so Temporal's UI shows admins the payloads the cluster
encrypts (common/payload_codec.py): `POST .../decode` and `.../encode` with `{"payloads": [...]}`
(Temporal's JSON form of Payload, bytes in base64).

Admins only (api/access.py). Temporal's UI calls it from the browser, at its own origin, with
the dashboard's cookie when "include cross-origin credentials" is on: the one origin allowed is
the UI's (EPOCHAL_TEMPORAL_UI_URL), so no other page can read what it answers.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Request, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from api.deps import AppSettings
from api.errors import ApiError
from common.payload_codec import EncryptionCodec, payload_key

router = APIRouter(prefix="/api/v1", tags=["temporal"])

MAX_PAYLOADS = 1000


def _cors(response: Response, request: Request, settings: AppSettings) -> None:
    origin = request.headers.get("origin")
    if origin and settings.temporal_ui_url and origin.rstrip("/") == settings.temporal_ui_url:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Credentials"] = "true"
        response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "Content-Type, X-Namespace"
        response.headers["Vary"] = "Origin"


async def _payloads(request: Request) -> Payloads:
    try:
        body = await request.json()
        if not isinstance(body, dict) or len(body.get("payloads") or []) > MAX_PAYLOADS:
            raise ValueError(f"expected {{\"payloads\": [...]}} of at most {MAX_PAYLOADS}")
        return json_format.ParseDict(body, Payloads())
    except (ValueError, json_format.ParseError) as err:
        raise ApiError(400, "not Temporal's payloads JSON", [f"payloads: {err}"]) from None


@functools.cache
def _codec(cluster_token: str) -> EncryptionCodec:
    """The cluster's codec, its key derived once (not per request)."""
    return EncryptionCodec(payload_key(cluster_token))


def _answer(payloads: list[Any]) -> dict[str, Any]:
    return json_format.MessageToDict(Payloads(payloads=payloads))


@router.options("/temporal-codec/{action}", include_in_schema=False)
async def preflight(action: str, request: Request, settings: AppSettings) -> Response:
    """The browser's CORS preflight (no credentials: it is answered to anyone)."""
    response = Response(status_code=204)
    _cors(response, request, settings)
    return response


@router.post("/temporal-codec/decode")
async def decode(request: Request, response: Response, settings: AppSettings) -> dict[str, Any]:
    payloads = await _payloads(request)
    _cors(response, request, settings)
    try:
        return _answer(await _codec(settings.cluster_token).decode(list(payloads.payloads)))
    except Exception as err:  # another cluster's key, or tampered: say which, not a 500
        raise ApiError(400, f"cannot decode these payloads: {err or type(err).__name__}") from None


@router.post("/temporal-codec/encode")
async def encode(request: Request, response: Response, settings: AppSettings) -> dict[str, Any]:
    payloads = await _payloads(request)
    _cors(response, request, settings)
    return _answer(await _codec(settings.cluster_token).encode(list(payloads.payloads)))

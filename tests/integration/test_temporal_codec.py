"""The master's codec endpoint (api/routes/temporal_codec.py): Temporal's UI shows admins the
payloads the cluster encrypts, and nobody else."""

from __future__ import annotations

import base64

import httpx
import pytest
import temporalio.converter
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from common.payload_codec import ENCODING, data_converter
from tests.integration.test_auth import ordinary  # noqa: F401 (a fixture: a user's token)
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

UI = "http://127.0.0.1:18233"


async def test_an_admin_reads_a_sealed_payload_and_no_one_else_does(
    live_master: LiveMaster, ordinary: str  # noqa: F811
) -> None:
    converter = data_converter(live_master.settings.cluster_token)
    [payload] = await converter.encode([{"secret_key": "s3cr3t"}])
    assert payload.metadata["encoding"] == ENCODING
    body = json_format.MessageToDict(Payloads(payloads=[payload]))
    async with httpx.AsyncClient(base_url=live_master.url) as client:
        admin = await client.post("/api/v1/temporal-codec/decode", json=body,
                                  headers=live_master.admin_headers)
        assert admin.status_code == 200, admin.text
        [decoded] = json_format.ParseDict(admin.json(), Payloads()).payloads
        assert (await temporalio.converter.DataConverter.default.decode([decoded], [dict])) == [
            {"secret_key": "s3cr3t"}]
        user = await client.post("/api/v1/temporal-codec/decode", json=body,
                                 headers={"Authorization": f"Bearer {ordinary}"})
        assert user.status_code == 403
        anonymous = await client.post("/api/v1/temporal-codec/decode", json=body)
        assert anonymous.status_code == 401
        # What a plain client wrote passes as it is; what is not payloads is a 400 naming it.
        [plain] = await temporalio.converter.DataConverter.default.encode(["old"])
        old = json_format.MessageToDict(Payloads(payloads=[plain]))
        again = await client.post("/api/v1/temporal-codec/decode", json=old,
                                  headers=live_master.admin_headers)
        assert again.json() == old
        bad = await client.post("/api/v1/temporal-codec/decode", json={"payloads": "x"},
                                headers=live_master.admin_headers)
        assert bad.status_code == 400 and "payloads" in bad.text
        # Encoding round-trips through the master's key.
        encoded = await client.post("/api/v1/temporal-codec/encode", json=old,
                                    headers=live_master.admin_headers)
        [sealed_again] = json_format.ParseDict(encoded.json(), Payloads()).payloads
        assert base64.b64encode(b"old") not in sealed_again.data
        assert await converter.decode([sealed_again], [str]) == ["old"]


async def test_the_browser_may_call_it_from_temporals_ui_only_with_the_admins_cookie(
    live_master: LiveMaster, ordinary: str  # noqa: F811
) -> None:
    converter = data_converter(live_master.settings.cluster_token)
    body = json_format.MessageToDict(Payloads(payloads=await converter.encode(["x"])))
    settings = live_master.app.state.settings
    live_master.app.state.settings = type(settings)(**{**settings.__dict__,
                                                       "temporal_ui_url": UI})
    try:
        async with httpx.AsyncClient(base_url=live_master.url) as client:
            preflight = await client.options(
                "/api/v1/temporal-codec/decode",
                headers={"Origin": UI, "Access-Control-Request-Method": "POST",
                         "Access-Control-Request-Headers": "content-type,x-namespace"})
            assert preflight.status_code == 204
            assert preflight.headers["access-control-allow-origin"] == UI
            assert preflight.headers["access-control-allow-credentials"] == "true"
            elsewhere = await client.options("/api/v1/temporal-codec/decode",
                                             headers={"Origin": "http://evil.example"})
            assert "access-control-allow-origin" not in elsewhere.headers
        # Cookies as the browser sends them: the dashboard's login, on any port of its host.
        async with httpx.AsyncClient(base_url=live_master.url,
                                     cookies={"auth": live_master.admin_token}) as browser:
            cookie = await browser.post("/api/v1/temporal-codec/decode", json=body,
                                        headers={"Origin": UI})
            assert cookie.status_code == 200, cookie.text
            assert cookie.headers["access-control-allow-origin"] == UI
            # The cookie opens no other write.
            other = await browser.post("/api/v1/experiments/1/kill")
            assert other.status_code == 401
        async with httpx.AsyncClient(base_url=live_master.url,
                                     cookies={"auth": ordinary}) as users_browser:
            users = await users_browser.post("/api/v1/temporal-codec/decode", json=body)
            assert users.status_code == 403
    finally:
        live_master.app.state.settings = settings

"""Temporal that authenticates its clients (mTLS): the master's and the agents' connection
settings (common/temporal_connection.py) against a real TLS endpoint in front of the session's
dev server, and the errors a wrong setting gets."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from common.temporal_connection import (
    API_KEY_ENV,
    CA_ENV,
    CERT_ENV,
    KEY_ENV,
    SERVER_NAME_ENV,
    TLS_ENV,
    TemporalConnectionError,
    TemporalSecurity,
    connect,
)
from tests.tls_proxy import Certificates, TlsProxy


async def test_a_client_with_its_certificate_is_served(tls_temporal: TlsProxy,
                                                      certs: Certificates) -> None:
    security = TemporalSecurity.from_env(certs.client_env())
    assert security.describe() == "TLS + client certificate"
    client = await connect(tls_temporal.address, "default", security)
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    assert info.server_version


@pytest.mark.parametrize("which", ["none", "stranger", "plaintext"])
async def test_a_client_without_a_certificate_of_the_ca_is_refused(
    tls_temporal: TlsProxy, certs: Certificates, which: str
) -> None:
    env = {
        "none": {CA_ENV: str(certs.ca)},
        "stranger": certs.client_env(certs.stranger_cert, certs.stranger_key),
        "plaintext": {},
    }[which]
    with pytest.raises(RuntimeError):
        client = await connect(tls_temporal.address, "default", TemporalSecurity.from_env(env))
        await client.workflow_service.get_system_info(GetSystemInfoRequest())


def test_wrong_settings_name_the_variable_and_what_is_expected(
    certs: Certificates, tmp_path: Path
) -> None:
    def error(env: dict[str, str]) -> str:
        with pytest.raises(TemporalConnectionError) as caught:
            TemporalSecurity.from_env(env)
        return str(caught.value)

    assert error({CERT_ENV: str(certs.client_cert)}) == (
        f"{CERT_ENV} is set but {KEY_ENV} is not: mTLS needs both the client certificate and "
        "its key")
    assert error({**certs.client_env(), CA_ENV: str(tmp_path / "nope.pem")}).startswith(
        f"{CA_ENV}: cannot read {tmp_path / 'nope.pem'}: No such file")
    readable = tmp_path / "client.key"
    readable.write_bytes(certs.client_key.read_bytes())
    readable.chmod(0o644)
    assert error(certs.client_env(key=readable)) == (
        f"{KEY_ENV}: {readable} is readable by other users (mode -rw-r--r--); trials run as "
        f"another user on this host: chmod 600 {readable}")
    garbage = tmp_path / "cert.pem"
    garbage.write_text("not a certificate")
    assert error(certs.client_env(cert=garbage)) == f"{CERT_ENV}: {garbage} is not a PEM file"
    assert error({TLS_ENV: "maybe"}) == f"{TLS_ENV}: expected true or false, got 'maybe'"


def test_what_each_setting_asks_of_the_connection(certs: Certificates) -> None:
    assert TemporalSecurity.from_env({}).tls_config() is False
    assert TemporalSecurity.from_env({}).describe() == "plaintext"
    api_key = TemporalSecurity.from_env({API_KEY_ENV: "k"})
    assert api_key.tls_config() is True and api_key.describe() == "TLS + API key"
    assert TemporalSecurity.from_env({TLS_ENV: "true"}).tls_config() is True
    named = TemporalSecurity.from_env({CA_ENV: str(certs.ca), SERVER_NAME_ENV: "temporal"})
    config = named.tls_config()
    assert not isinstance(config, bool)
    assert config.domain == "temporal" and config.server_root_ca_cert == certs.ca.read_bytes()
    assert config.client_cert is None

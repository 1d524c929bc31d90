"""How the master and the agents reach Temporal: one set of environment variables for both.

A local dev server needs only an address. A Temporal that authenticates its clients (a
self-hosted cluster with mTLS, Temporal Cloud) needs TLS, a client certificate or an API key:

    EPOCHAL_TEMPORAL_TLS_CERT / _KEY   the client's certificate and key (PEM files): mTLS
    EPOCHAL_TEMPORAL_TLS_CA            the CA that signed the server's certificate (else the
                                       system's roots)
    EPOCHAL_TEMPORAL_TLS_SERVER_NAME   the name to check the server's certificate against
    EPOCHAL_TEMPORAL_API_KEY           an API key (Temporal Cloud); implies TLS
    EPOCHAL_TEMPORAL_TLS=true          TLS with none of the above (the system's roots)

The key and the API key are secrets of the agent: trials never inherit these variables (the
process runtime passes an allowlist), and an agent refuses a key file other users can read,
since trials run as another user on its host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.service import TLSConfig

from common.flags import FlagError, flag

CERT_ENV = "EPOCHAL_TEMPORAL_TLS_CERT"
KEY_ENV = "EPOCHAL_TEMPORAL_TLS_KEY"
CA_ENV = "EPOCHAL_TEMPORAL_TLS_CA"
SERVER_NAME_ENV = "EPOCHAL_TEMPORAL_TLS_SERVER_NAME"
API_KEY_ENV = "EPOCHAL_TEMPORAL_API_KEY"
TLS_ENV = "EPOCHAL_TEMPORAL_TLS"


class TemporalConnectionError(ValueError):
    """A setting that cannot work, naming the variable and what was expected."""


@dataclass(frozen=True)
class TemporalSecurity:
    """TLS and credentials for a Temporal that authenticates its clients; empty for a dev
    server."""

    cert: bytes | None = None
    key: bytes | None = None
    ca: bytes | None = None
    server_name: str | None = None
    api_key: str | None = None
    tls: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TemporalSecurity:
        env = os.environ if env is None else env
        cert_path, key_path = env.get(CERT_ENV) or None, env.get(KEY_ENV) or None
        if bool(cert_path) != bool(key_path):
            given, missing = (CERT_ENV, KEY_ENV) if cert_path else (KEY_ENV, CERT_ENV)
            raise TemporalConnectionError(f"{given} is set but {missing} is not: mTLS needs "
                                          "both the client certificate and its key")
        ca_path = env.get(CA_ENV) or None
        try:
            tls = flag(TLS_ENV, env.get(TLS_ENV))
        except FlagError as err:
            raise TemporalConnectionError(str(err)) from None
        return cls(
            cert=_read(CERT_ENV, cert_path),
            key=_read(KEY_ENV, key_path, private=True),
            ca=_read(CA_ENV, ca_path),
            server_name=env.get(SERVER_NAME_ENV) or None,
            api_key=env.get(API_KEY_ENV) or None,
            tls=tls,
        )

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls or self.cert or self.ca or self.api_key or self.server_name)

    def tls_config(self) -> TLSConfig | bool:
        if self.cert or self.ca or self.server_name:
            return TLSConfig(server_root_ca_cert=self.ca, domain=self.server_name,
                             client_cert=self.cert, client_private_key=self.key)
        return self.uses_tls

    def describe(self) -> str:
        """For logs: how the connection is secured, no secret."""
        if not self.uses_tls:
            return "plaintext"
        parts = ["TLS"]
        if self.cert:
            parts.append("client certificate")
        if self.api_key:
            parts.append("API key")
        return " + ".join(parts)


def _read(variable: str, path: str | None, *, private: bool = False) -> bytes | None:
    if path is None:
        return None
    file = Path(path)
    try:
        mode = file.stat().st_mode
        data = file.read_bytes()
    except OSError as err:
        raise TemporalConnectionError(
            f"{variable}: cannot read {path}: {err.strerror or err}") from None
    if private and mode & (stat.S_IRGRP | stat.S_IROTH):
        raise TemporalConnectionError(
            f"{variable}: {path} is readable by other users (mode {stat.filemode(mode)}); "
            f"trials run as another user on this host: chmod 600 {path}")
    if b"-----BEGIN" not in data:
        raise TemporalConnectionError(f"{variable}: {path} is not a PEM file")
    return data


async def connect(address: str, namespace: str, security: TemporalSecurity,
                  interceptors: Sequence[Interceptor] = (), **kwargs: Any) -> Client:
    """A client of `namespace` at `address`, secured as `security` says."""
    return await Client.connect(address, namespace=namespace, tls=security.tls_config(),
                                api_key=security.api_key, interceptors=interceptors, **kwargs)

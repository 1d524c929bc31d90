"""A Temporal frontend that authenticates its clients, as a production cluster with mTLS does:
a TLS proxy (client certificate required, signed by its CA; ALPN h2) in front of the session's
dev server, which speaks plaintext gRPC. Certificates are made with the openssl CLI.

Fixtures (a pytest plugin of tests/conftest.py): `certs`, and `tls_temporal`, the proxy, both
made once per session and only when a test asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA: refused
    stranger_key: Path

    def client_env(self, cert: Path | None = None, key: Path | None = None) -> dict[str, str]:
        """The master's and agents' environment for mTLS (common/temporal_connection.py)."""
        from common.temporal_connection import CA_ENV, CERT_ENV, KEY_ENV

        return {CERT_ENV: str(cert or self.client_cert), KEY_ENV: str(key or self.client_key),
                CA_ENV: str(self.ca)}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _signed(directory: Path, name: str, ca: str, subject: str, extensions: str) -> None:
    key, csr, cert = (str(directory / f"{name}.{ext}") for ext in ("key", "csr", "pem"))
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", subject)
    _openssl("x509", "-req", "-in", csr, "-CA", f"{directory / ca}.pem", "-CAkey",
             f"{directory / ca}.key", "-CAcreateserial", "-out", cert, "-days", "2",
             "-extfile", str(ext))
    (directory / f"{name}.key").chmod(0o600)


def make_certificates(directory: Path) -> Certificates:
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-keyout", str(directory / f"{ca}.key"), "-out", str(directory / f"{ca}.pem"),
                 "-subj", f"/CN=epochal test {ca}")
    _signed(directory, "server", "ca", "/CN=temporal",
            "subjectAltName=IP:127.0.0.1,DNS:temporal\nextendedKeyUsage=serverAuth\n")
    _signed(directory, "client", "ca", "/CN=epochal-agent", "extendedKeyUsage=clientAuth\n")
    _signed(directory, "stranger", "other-ca", "/CN=stranger", "extendedKeyUsage=clientAuth\n")
    d = directory
    return Certificates(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
                        d / "client.key", d / "stranger.pem", d / "stranger.key")


class TlsProxy:
    """Listens on 127.0.0.1:`port` with TLS, forwards each connection to `upstream`."""

    def __init__(self, upstream: str, certs: Certificates) -> None:
        self.upstream_host, _, port = upstream.rpartition(":")
        self.upstream_port = int(port)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
        context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
        context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        self.context = context
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tls-proxy")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self._thread.join(10)

    async def _stop(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.loop.call_soon(self.loop.stop)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=self.context, ssl_handshake_timeout=5))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            client_w.close()
            return

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ssl.SSLError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
                w.close()

        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tls_temporal(temporal_address: str, certs: Certificates) -> Iterator[TlsProxy]:
    with TlsProxy(temporal_address, certs) as proxy:
        yield proxy

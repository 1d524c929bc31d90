"""Fixtures shared by the whole suite: one PostgreSQL and one Temporal dev server per session.

They are lazy: a test that asks for none of them starts nothing. Env EPOCHAL_TEST_DB_URL /
EPOCHAL_TEST_TEMPORAL_ADDRESS point them at servers that already run instead.

PostgreSQL data never goes under pytest's tmp_path: as root the server runs as another user that
must traverse the parent directories, and every pytest session that starts (another suite run
alongside, or a pytest inside a test) resets /tmp/pytest-of-<user> to mode 0700, which would pull
the data directory away from a running server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio

from deploy.postgres import EmbeddedPostgres, bin_dir
from deploy.processes import free_port
from deploy.temporal_server import TemporalDevServer

pytest_plugins = ["tests.master_fixtures", "tests.docker_fixtures", "tests.agent_fixtures",
                  "tests.s3_fixtures", "tests.tls_proxy",
                  "tests.determined.det_venv"]

# End-to-end clusters share the session's Temporal server in their own namespace, so that the
# session's in-process master worker (namespace `default`) never takes their tasks.
E2E_NAMESPACE = "epochal-e2e"


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new directory directly under the system temp dir, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of database `epochal_test` on a PostgreSQL started once for the session."""
    external = os.environ.get("EPOCHAL_TEST_DB_URL")
    if external:
        yield external
        return
    with scratch_dir("epochal-test-pg-") as root:
        server = EmbeddedPostgres(root / "data", log_file=root / "postgres.log",
                                  fast_unsafe=True)
        port = free_port()
        try:
            server.start(port)
            yield server.ensure_database("epochal_test", port)
        finally:
            server.stop()


@contextmanager
def fresh_database(postgres_url: str, prefix: str = "epochal_test") -> Iterator[str]:
    """URL of a new, empty database on the session's server, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _psql(postgres_url, f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(postgres_url, name)
    finally:
        _psql(postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_db_url(postgres_url: str) -> Iterator[str]:
    """URL of a new, empty database on the session's server, dropped after the test."""
    with fresh_database(postgres_url) as url:
        yield url


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _psql(url: str, sql: str) -> None:
    """Run one statement from the `postgres` maintenance database (not the one being dropped)."""
    cmd = [str(bin_dir() / "psql"), _with_database(url, "postgres"), "-v", "ON_ERROR_STOP=1",
           "-qc", sql]
    subprocess.run(cmd, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a headless Temporal dev server started once for the session."""
    external = os.environ.get("EPOCHAL_TEST_TEMPORAL_ADDRESS")
    if external:
        yield external
        return
    root = tmp_path_factory.mktemp("temporal")
    server = TemporalDevServer(root / "temporal.db", log_file=root / "temporal.log",
                               pid_file=root / "temporal.pid")
    try:
        yield server.start(free_port(), headless=True, extra_namespaces=(E2E_NAMESPACE,))
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_client(temporal_address: str) -> AsyncIterator:
    """A connected temporalio Client on namespace `default`."""
    from temporalio.client import Client

    yield await Client.connect(temporal_address)


@pytest.fixture
def tmp_state_dir() -> Iterator[Path]:
    """An empty directory for a local cluster's state (EPOCHAL_STATE_DIR), PostgreSQL-safe."""
    with scratch_dir("epochal-test-state-") as path:
        yield path

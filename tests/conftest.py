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
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio

from common.processes import free_port
from deploy.postgres import EmbeddedPostgres, bin_dir
from deploy.temporal_server import TemporalDevServer

pytest_plugins = ["tests.master_fixtures", "tests.docker_fixtures", "tests.agent_fixtures",
                  "tests.s3_fixtures", "tests.tls_proxy",
                  "tests.determined.det_venv"]

# The CLIs the tests run write to pipes and shape their tables to COLUMNS when it is set: xdist's
# workers are given a terminal's size (80x24) their output never reaches, which would cut columns.
for _variable in ("COLUMNS", "LINES"):
    os.environ.pop(_variable, None)

# End-to-end clusters share the session's Temporal server in their own namespace, so that the
# session's in-process master worker (namespace `default`) never takes their tasks.
E2E_NAMESPACE = "epochal-e2e"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Shape the run for `make test`'s workers (pytest-xdist, `--dist loadgroup`).

    Tests that share a fixture wider than a test and narrower than the session (a module's
    cluster or browser, the workflow tests' namespace and worker) form one group, which runs on
    one worker so that fixture starts once; every other test is scheduled on its own. Slow tests
    (marked `slow`: they start clusters) come first, so that the quick ones fill the workers'
    last minutes instead of one cluster test running alone at the end. A stable sort, so a
    serial run keeps each module's tests together and in their order.
    """
    for item in items:
        group = _shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test prints the end of the logs of every cluster it used (tests/e2e/cluster.py's
    `failure_logs`), so a failure in CI explains itself without a rerun."""
    report = yield
    if report.failed:
        for fixture in _fixture_values(item):
            failure_logs = getattr(fixture, "failure_logs", None)
            if callable(failure_logs):
                for name, text in failure_logs():
                    report.sections.append((f"cluster log {name}", text))
    return report


def _fixture_definitions(item: pytest.Item) -> list[Any]:
    """The definition of each fixture `item` uses (the one in effect where it is overridden)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [definitions[-1] for definitions in info.name2fixturedefs.values()]


def _fixture_values(item: pytest.Item) -> list[Any]:
    """The values of the fixtures `item` used that are still set up."""
    cached = (definition.cached_result for definition in _fixture_definitions(item))
    return [result[0] for result in cached if result is not None and result[0] is not None]


def pytest_configure(config: pytest.Config) -> None:
    """pytest 9.2 ids tests in a way pytest-xdist 3.8's `--dist loadgroup` cannot mark (its issue
    1386): every test of a module with a cluster would start one, on every worker. Refuse rather
    than run so, slowly (pyproject.toml pins pytest below 9.2)."""
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} breaks pytest-xdist's --dist loadgroup (tests of one "
            "group are spread over the workers): install pytest<9.2, as pyproject.toml says")


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The package or module whose fixtures `item` shares with its neighbours, if any."""
    scopes = {definition.scope for definition in _fixture_definitions(item)}
    if "package" in scopes:
        return str(item.path.parent.relative_to(item.config.rootpath))
    if scopes & {"module", "class"}:
        return item.nodeid.split("::")[0]
    return None


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
def temporal_dev_server(tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[tuple[str, str | None]]:
    """host:port of a Temporal dev server started once for the session, and its web UI's
    address (None where an external server's is not given)."""
    external = os.environ.get("EPOCHAL_TEST_TEMPORAL_ADDRESS")
    if external:
        yield external, os.environ.get("EPOCHAL_TEST_TEMPORAL_UI_URL") or None
        return
    root = tmp_path_factory.mktemp("temporal")
    server = TemporalDevServer(root / "temporal.db", log_file=root / "temporal.log",
                               pid_file=root / "temporal.pid")
    ui_port = free_port()
    try:
        yield (server.start(free_port(), ui_port=ui_port, extra_namespaces=(E2E_NAMESPACE,)),
               f"http://127.0.0.1:{ui_port}")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def temporal_address(temporal_dev_server: tuple[str, str | None]) -> str:
    return temporal_dev_server[0]


@pytest.fixture(scope="session")
def temporal_ui_url(temporal_dev_server: tuple[str, str | None]) -> str | None:
    return temporal_dev_server[1]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_client(temporal_address: str) -> AsyncIterator:
    """A connected temporalio Client on namespace `default`, with the master's converter for a
    cluster without a token (its workers end workflows as the master's do)."""
    from temporalio.client import Client

    from common.payload_codec import data_converter

    yield await Client.connect(temporal_address, data_converter=data_converter(None))


@pytest.fixture
def tmp_state_dir() -> Iterator[Path]:
    """An empty directory for a local cluster's state (EPOCHAL_STATE_DIR), PostgreSQL-safe."""
    with scratch_dir("epochal-test-state-") as path:
        yield path

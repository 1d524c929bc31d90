"""The embedded PostgreSQL: starts detached on TCP, keeps data across restarts, fails clearly."""

from __future__ import annotations

import socket
from pathlib import Path

import asyncpg
import pytest

from common.processes import ClusterError, free_port
from deploy.postgres import EmbeddedPostgres


@pytest.fixture
def server(tmp_state_dir: Path):
    pg = EmbeddedPostgres(tmp_state_dir / "pg", log_file=tmp_state_dir / "logs" / "postgres.log",
                          fast_unsafe=True)
    yield pg
    pg.stop()


async def test_data_survives_a_restart(server: EmbeddedPostgres) -> None:
    port = free_port()
    server.start(port)
    assert server.is_running() and server.answers()
    assert server.port() == port
    url = server.ensure_database("epochal")
    assert url == f"postgresql://postgres:{server.password()}@127.0.0.1:{port}/epochal"
    assert server.ensure_database("epochal") == url  # already there: no error

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE kept (id int PRIMARY KEY, note text)")
        await conn.execute("INSERT INTO kept VALUES (1, 'still here')")
    finally:
        await conn.close()

    assert server.stop()
    assert not server.is_running() and not server.answers(port)
    assert not server.stop()

    assert not server.init()  # PG_VERSION exists: initdb is not run again
    server.start(port)
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT note FROM kept WHERE id = 1") == "still here"
    finally:
        await conn.close()


async def test_tcp_clients_need_the_password(server: EmbeddedPostgres) -> None:
    port = free_port()
    server.start(port)
    url = server.ensure_database("epochal")
    assert server.password_file.stat().st_mode & 0o777 == 0o600
    for login in ("postgres", "postgres:wrong"):
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(f"postgresql://{login}@127.0.0.1:{port}/epochal")
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SHOW password_encryption") == "scram-sha-256"
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
    finally:
        await conn.close()


async def test_a_server_started_before_passwords_gets_one(server: EmbeddedPostgres) -> None:
    """A data directory from before (pg_hba.conf `trust`, no password), its server running:
    the next `start` sets the password and the rules without a restart, losing nothing."""
    port = free_port()
    server.start(port)
    (server.data_dir / "pg_hba.conf").write_text("local all all trust\n"
                                                 "host all all 127.0.0.1/32 trust\n")
    server._psql("SELECT pg_reload_conf()", "reload")
    open_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    conn = await asyncpg.connect(open_url)
    await conn.close()
    pid = server.pid()
    server.start(port)
    assert server.pid() == pid
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(open_url)


def test_start_twice_leaves_the_server_alone(server: EmbeddedPostgres) -> None:
    port = free_port()
    server.start(port)
    pid = server.pid()
    server.start(port)
    assert server.pid() == pid
    with pytest.raises(ClusterError, match=rf"already running on port {port}"):
        server.start(free_port())


def test_port_taken_is_a_clear_error(server: EmbeddedPostgres) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ClusterError, match=rf"^postgres: port {port} .* already in use"):
            server.start(port)
    assert not server.is_running()


def test_a_server_that_cannot_start_shows_its_log(server: EmbeddedPostgres) -> None:
    server.init()
    conf = server.data_dir / "postgresql.conf"
    conf.write_text(conf.read_text() + "\nshared_buffers = 'plenty'\n")
    with pytest.raises(ClusterError) as err:
        server.start(free_port())
    message = str(err.value)
    assert message.startswith("postgres: the server did not start")
    assert str(server.log_file) in message
    assert "shared_buffers" in message
    assert not server.is_running()

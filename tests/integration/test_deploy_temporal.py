"""The Temporal dev server: starts detached, is idempotent, keeps workflows across restarts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from common.processes import ClusterError, free_port, is_alive
from deploy import temporal_server
from deploy.temporal_server import TemporalDevServer


@pytest.fixture
def server(tmp_path: Path):
    dev = TemporalDevServer(tmp_path / "temporal.db", log_file=tmp_path / "logs" / "temporal.log",
                            pid_file=tmp_path / "run" / "temporal.pid")
    yield dev
    dev.stop(grace=5)


async def test_workflows_survive_a_restart(server: TemporalDevServer) -> None:
    port = free_port()
    address = server.start(port, headless=True)
    assert address == f"127.0.0.1:{port}"
    pid = server.pid()
    assert pid is not None and temporal_server.answers(address)
    assert server.start(port, headless=True) == address
    assert server.pid() == pid  # already running: left alone

    client = await Client.connect(address)
    # No worker polls this queue: the workflow just stays open, which is all we need.
    handle = await client.start_workflow("NobodyRunsThis", id="kept-across-restart",
                                         task_queue="no-worker-here")

    assert server.stop(grace=5)
    assert not is_alive(pid) and server.pid() is None
    assert not temporal_server.answers(address)

    server.start(port, headless=True)
    client = await Client.connect(address)
    described = await client.get_workflow_handle(handle.id).describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    assert described.workflow_type == "NobodyRunsThis"


def test_port_taken_is_a_clear_error(server: TemporalDevServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ClusterError, match=rf"^temporal: port {port} .* already in use"):
            server.start(port, headless=True)
    assert server.pid() is None


def test_a_server_that_dies_shows_its_log(tmp_path: Path) -> None:
    not_a_file = tmp_path / "a-directory"
    not_a_file.mkdir()
    dev = TemporalDevServer(not_a_file, log_file=tmp_path / "temporal.log",
                            pid_file=tmp_path / "temporal.pid")
    try:
        with pytest.raises(ClusterError) as err:
            dev.start(free_port(), headless=True, timeout=30)
    finally:
        dev.stop(grace=5)
    message = str(err.value)
    assert message.startswith("temporal: exited before it answered")
    assert str(tmp_path / "temporal.log") in message
    assert "last lines of the log" in message


def test_a_start_that_crashes_is_tried_again_and_a_crash_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dev server chooses its internal ports itself and panics when another process took
    one first: the first start here panics as it would, the second is the real server."""
    real = temporal_server.temporal_binary()
    crashed_once = tmp_path / "crashed-once"
    flaky = tmp_path / "temporal"
    flaky.write_text(
        "#!/bin/sh\n"
        f'if [ ! -e "{crashed_once}" ]; then touch "{crashed_once}"\n'
        '  echo "panic: listen tcp 127.0.0.1:40000: bind: address already in use"\n'
        '  echo "goroutine 1 [running]:"; exit 2; fi\n'
        f'exec "{real}" "$@"\n')
    flaky.chmod(0o755)
    monkeypatch.setattr(temporal_server, "temporal_binary", lambda: flaky)
    dev = TemporalDevServer(tmp_path / "temporal.db", log_file=tmp_path / "temporal.log",
                            pid_file=tmp_path / "temporal.pid")
    try:
        address = dev.start(free_port(), headless=True, timeout=30)
        assert crashed_once.exists() and temporal_server.answers(address)
    finally:
        dev.stop(grace=5)

    monkeypatch.setattr(TemporalDevServer, "start_attempts", 1)
    crashed_once.unlink()
    with pytest.raises(ClusterError) as err:
        dev.start(free_port(), headless=True, timeout=30)
    assert "it crashed with: panic: listen tcp 127.0.0.1:40000: bind: address already in use" \
        in str(err.value)

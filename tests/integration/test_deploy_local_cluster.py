"""`up` / `down` / `status` of the local cluster on real PostgreSQL and Temporal servers."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from common.processes import ClusterError, free_port
from deploy import local_cluster
from deploy.local_cluster import ClusterSettings
from deploy.postgres import without_password

SERVERS = ("postgres", "temporal")


@pytest.fixture
def settings(tmp_state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("EPOCHAL_DB_URL", raising=False)
    monkeypatch.delenv("EPOCHAL_TEMPORAL_ADDRESS", raising=False)
    s = ClusterSettings(state_dir=tmp_state_dir, api_port=free_port(),
                        temporal_port=free_port(), postgres_port=free_port(),
                        headless_temporal=True, agent_slots=1, start_timeout=60, stop_grace=5)
    yield s
    local_cluster.down(s)


def _pids(s: ClusterSettings) -> dict[str, int | None]:
    return {p.name: p.pid for p in local_cluster.status(s).parts}


async def test_up_down_up_keeps_data(settings: ClusterSettings) -> None:
    steps: list[str] = []
    info = local_cluster.up(settings, parts=SERVERS, report=steps.append)
    assert [step.split(":")[0] for step in steps] == ["postgres", "temporal"]
    assert without_password(info.db_url) == (
        f"postgresql://postgres:***@127.0.0.1:{settings.postgres_port}/epochal")
    assert "***" in "".join(steps) and info.db_url not in "".join(steps)  # shown, not its password
    assert info.temporal_address == f"127.0.0.1:{settings.temporal_port}"
    assert info.temporal_ui_url is None

    st = {p.name: p for p in local_cluster.status(settings).parts}
    for name in SERVERS:
        assert st[name].running and st[name].answering and st[name].pid, st[name]
        assert st[name].log_file == settings.state_dir / "logs" / f"{name}.log"
    assert not st["master"].running and not st["agent"].running
    assert (settings.state_dir / "run" / "temporal.pid").exists()
    assert (settings.state_dir / "run" / "postgres.pid").exists()

    pids = _pids(settings)
    assert local_cluster.up(settings, parts=SERVERS) == info  # idempotent
    assert _pids(settings) == pids

    conn = await asyncpg.connect(info.db_url)
    try:
        await conn.execute("CREATE TABLE kept (note text)")
        await conn.execute("INSERT INTO kept VALUES ('across down and up')")
    finally:
        await conn.close()
    client = await Client.connect(info.temporal_address)
    await client.start_workflow("NobodyRunsThis", id="kept", task_queue="no-worker-here")

    assert sorted(local_cluster.down(settings)) == sorted(SERVERS)
    st = local_cluster.status(settings)
    assert not any(p.running or p.answering for p in st.parts)
    assert not list((settings.state_dir / "run").glob("*.pid"))
    assert local_cluster.down(settings) == []

    local_cluster.up(settings, parts=SERVERS)
    conn = await asyncpg.connect(info.db_url)
    try:
        assert await conn.fetchval("SELECT note FROM kept") == "across down and up"
    finally:
        await conn.close()
    client = await Client.connect(info.temporal_address)
    described = await client.get_workflow_handle("kept").describe()
    assert described.status == WorkflowExecutionStatus.RUNNING


def test_up_cleans_a_stale_pid_file(settings: ClusterSettings) -> None:
    pid_file = settings.pid_file("temporal")
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("999999999\n")
    local_cluster.up(settings, parts=("temporal",))
    pid = int(pid_file.read_text())
    assert pid != 999999999
    assert _pids(settings)["temporal"] == pid


def test_up_with_a_taken_port_names_the_part(settings: ClusterSettings) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        settings.temporal_port = s.getsockname()[1]
        with pytest.raises(ClusterError) as err:
            local_cluster.up(settings, parts=SERVERS)
    message = str(err.value)
    assert message.startswith(f"temporal: port {settings.temporal_port} on 127.0.0.1 is already")
    assert str(settings.state_dir / "logs" / "temporal.log") in message
    # The part started before the failing one keeps running; `down` stops it.
    assert {p.name: p.running for p in local_cluster.status(settings).parts}["postgres"]
    assert local_cluster.down(settings) == ["postgres"]


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not (_has_module("deploy.master") and _has_module("agent_worker.__main__")),
                    reason="the master or the agent entry point is not written yet")
def test_whole_cluster_up_status_down(settings: ClusterSettings) -> None:
    info = local_cluster.up(settings)
    st = local_cluster.status(settings)
    assert st.all_answering, st.parts
    assert info.dashboard_url == f"http://127.0.0.1:{settings.api_port}/"
    pids = _pids(settings)
    local_cluster.up(settings)
    assert _pids(settings) == pids
    assert local_cluster.down(settings) == ["agent", "master", "temporal", "postgres"]
    assert not any(p.running for p in local_cluster.status(settings).parts)

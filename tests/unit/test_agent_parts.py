"""The agent's smaller parts: log shipping, registration, slots, arguments, environment."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import agent_worker
from agent_worker.logs import LogShipper, Tracebacks, log_level, naming_exception, pump_lines
from agent_worker.main import parse_args
from agent_worker.process_runtime import (
    DEFAULT_KILL_GRACE_SECONDS,
    ProcessRuntime,
    describe_exit,
    kill_grace_from_env,
)
from agent_worker.registration import Registration
from agent_worker.runtime import ExitStatus, Launch
from agent_worker.slots import SlotPool, cpu_slots, discover_slots
from agent_worker.trial_info import trial_environment
from agent_worker.trial_runs import AgentActivities
from common.expconf import EnvironmentConfig
from tests.fakes.agent_master import FakeMaster
from tests.fakes.run_specs import spec_of
from wire.workflow_io import RunTrialInput


def shipper(master_url: str, http: httpx.AsyncClient, **kwargs: Any) -> LogShipper:
    kwargs.setdefault("flush_interval", 0.05)
    return LogShipper(http, master_url, task_id="1.2", allocation_id="1.2.1", agent_id="a",
                      **kwargs)


def test_public_names() -> None:
    assert set(agent_worker.__all__) == {
        "Agent", "AgentActivities", "AgentConfig", "ExitStatus", "ProcessRuntime", "Runtime",
        "Launch", "main"}


async def test_shipper_retries_until_the_master_takes_the_lines(
        master: FakeMaster, http: httpx.AsyncClient) -> None:
    master.fail_log_posts = 2
    s = shipper(master.url, http)
    s.start()
    for i in range(300):
        s.add("stdout", f"line {i}")
    await s.close(timeout=10)
    assert master.log_lines() == [f"line {i}" for i in range(300)]  # in order, none twice
    assert master.log_posts >= 3
    assert s.shipped == 300 and s.pending == 0


async def test_shipper_flushes_on_its_interval_and_at_the_batch_size(
        master: FakeMaster, http: httpx.AsyncClient) -> None:
    s = shipper(master.url, http, flush_interval=30, batch_lines=10)
    s.start()
    for i in range(9):
        s.add("stdout", f"line {i}")
    await asyncio.sleep(0.2)
    assert master.logs == []  # neither the interval nor the batch size reached
    s.add("stdout", "line 9")
    for _ in range(100):
        if len(master.logs) == 10:
            break
        await asyncio.sleep(0.02)
    assert len(master.logs) == 10
    await s.close(timeout=5)


async def test_shipper_keeps_the_head_and_the_tail_beyond_its_bound(
        master: FakeMaster, http: httpx.AsyncClient) -> None:
    """A flood keeps its first lines and its last (where a traceback is); the middle goes."""
    master.fail_log_posts = 1_000_000  # the master is not taking logs
    s = shipper(master.url, http, max_buffered=10)
    s.start()
    for i in range(25):
        s.add("stdout", f"line {i}")  # never blocks
    assert s.dropped == 10 and s.pending == 15
    master.fail_log_posts = 0
    for _ in range(200):
        if s.pending == 0:
            break
        await asyncio.sleep(0.02)
    s.add("stdout", "after")
    await s.close(timeout=5)
    lines = master.log_lines()
    assert lines[:10] == [f"line {i}" for i in range(10)]
    assert "10 log lines were dropped here" in lines[10]
    assert master.logs[10]["level"] == "LOG_LEVEL_WARNING"
    assert lines[11:] == [f"line {i}" for i in range(20, 25)] + ["after"]


async def test_shipper_spools_to_disk_and_close_waits_for_the_master(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path) -> None:
    """With a spool no line is dropped while the master is away, and a close without a
    timeout returns only once every line is delivered, heartbeating meanwhile."""
    master.fail_log_posts = 1_000_000
    s = shipper(master.url, http, max_buffered=10, max_spool_bytes=1 << 20,
                spool_dir=tmp_path / "spool")
    s.start()
    for i in range(500):
        s.add("stdout", f"line {i}")
    assert s.dropped == 0 and s.pending == 500
    assert any((tmp_path / "spool").iterdir())
    beats = 0

    def heartbeat() -> None:
        nonlocal beats
        beats += 1
        if beats == 2:
            master.fail_log_posts = 0  # the master is back

    await asyncio.wait_for(s.close(None, heartbeat=heartbeat), timeout=60)
    assert master.log_lines() == [f"line {i}" for i in range(500)]
    assert beats >= 2 and s.pending == 0
    assert not any((tmp_path / "spool").iterdir())


async def test_shipper_gives_up_at_close_when_the_master_is_away(
        http: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = shipper(f"http://127.0.0.1:{port}", http)
    s.start()
    s.add("stdout", "lost")
    await s.close(timeout=0.3)
    assert s.given_up == 1 and s.shipped == 0


async def test_pump_splits_lines_and_cuts_very_long_ones() -> None:
    class Sink:
        def __init__(self) -> None:
            self.lines: list[tuple[str, str]] = []

        def add(self, stdtype: str, line: str) -> None:
            self.lines.append((stdtype, line))

    reader = asyncio.StreamReader()
    reader.feed_data(b"a\r\nb\n" + b"x" * (64 * 1024 + 5) + b"\n\xff tail")
    reader.feed_eof()
    sink = Sink()
    await pump_lines(reader, "stderr", sink)
    assert [line for _, line in sink.lines] == ["a", "b", "x" * 64 * 1024, "xxxxx", "\ufffd tail"]
    assert {t for t, _ in sink.lines} == {"stderr"}


@pytest.mark.parametrize(("line", "level"), [
    ("INFO: hello", "LOG_LEVEL_INFO"),
    ("[rank=0] ERROR: boom", "LOG_LEVEL_ERROR"),
    ("[WARN] careful", "LOG_LEVEL_WARNING"),
    ("DEBUG hello", "LOG_LEVEL_DEBUG"),
    ("plain text", "LOG_LEVEL_INFO"),
    ("INFORMATION", "LOG_LEVEL_INFO"),
])
def test_log_level(line: str, level: str) -> None:
    assert log_level(line) == level


async def test_registration_retries_until_the_master_answers_then_heartbeats(
        master: FakeMaster, http: httpx.AsyncClient) -> None:
    master.fail_registrations = 2
    reg = Registration(http, master.url, agent_id="host 1", resource_pool="gpus",
                       slots=cpu_slots(2), interval=0.05)
    await asyncio.wait_for(reg.wait_registered(), timeout=10)
    assert reg.registered
    agent_id, body = master.registrations[0]
    assert agent_id == "host%201"
    assert body["resourcePool"] == "gpus"
    assert body["version"]
    assert [s["id"] for s in body["slots"]] == ["0", "1"]
    assert body["slots"][0]["type"] == "TYPE_CPU"
    assert body["slots"][0]["device"]["uuid"] is None
    assert body["slots"][0]["device"]["brand"]

    beat = asyncio.create_task(reg.heartbeat_forever())
    await asyncio.sleep(0.3)
    beat.cancel()
    await asyncio.gather(beat, return_exceptions=True)
    assert len(master.registrations) >= 3
    assert await reg.cluster_id() == "test-cluster"


async def test_registration_never_raises_when_the_master_is_away(
        http: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reg = Registration(http, f"http://127.0.0.1:{port}", agent_id="a", resource_pool="default",
                       slots=cpu_slots(1))
    assert await reg.register_once() is False
    assert await reg.cluster_id() is None


def test_slots() -> None:
    assert len(discover_slots(None)) == (os.cpu_count() or 1)
    slots = discover_slots(3)
    assert [s.id for s in slots] == [0, 1, 2]
    assert slots[0].to_api() == {"id": "0", "type": "TYPE_CPU",
                                 "device": {"brand": slots[0].brand, "uuid": None}}
    with pytest.raises(ValueError):
        cpu_slots(0)
    pool = SlotPool(cpu_slots(2))
    a, b = pool.acquire(), pool.acquire()
    assert (a, b) == ([0], [1])
    assert pool.acquire() == [0]  # more runs than slots: shared, least used first
    pool.release(a)
    pool.release([0])
    assert pool.in_use() == 1 and pool.acquire() == [0]


def test_arguments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EPOCHAL_MASTER", raising=False)
    config, level = parse_args(["--work-dir", str(tmp_path)])
    assert config.agent_id == socket.gethostname()
    assert config.master_url == "http://127.0.0.1:8080"
    assert config.temporal_address == "127.0.0.1:7233"
    assert (config.namespace, config.resource_pool, config.slots) == ("default", "default", None)
    assert config.work_dir == tmp_path and level == "INFO"

    config, _ = parse_args(["--master", "http://m:1/", "--temporal", "t:7", "--namespace", "ns",
                            "--pool", "p", "--slots", "4", "--work-dir", str(tmp_path),
                            "--agent-id", "me"])
    assert (config.master_url, config.temporal_address, config.namespace,
            config.resource_pool, config.slots, config.agent_id) == (
        "http://m:1", "t:7", "ns", "p", 4, "me")
    with pytest.raises(SystemExit):
        parse_args(["--slots", "0"])


def test_the_waits_a_test_cluster_lowers_default_as_before_and_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("EPOCHAL_LOG_CLOSE_TIMEOUT_SECONDS", "EPOCHAL_AGENT_REJOIN_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    config, _ = parse_args(["--work-dir", str(tmp_path)])
    assert (config.log_close_timeout, config.rejoin_after) == (30.0, 60.0)
    monkeypatch.setenv("EPOCHAL_LOG_CLOSE_TIMEOUT_SECONDS", "5")
    monkeypatch.setenv("EPOCHAL_AGENT_REJOIN_SECONDS", "15")
    config, _ = parse_args(["--work-dir", str(tmp_path)])
    assert (config.log_close_timeout, config.rejoin_after) == (5.0, 15.0)
    config, _ = parse_args(["--work-dir", str(tmp_path), "--log-close-timeout", "2",
                            "--rejoin-after", "20"])
    assert (config.log_close_timeout, config.rejoin_after) == (2.0, 20.0)
    for bad in (["--log-close-timeout", "0"], ["--rejoin-after", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(["--work-dir", str(tmp_path), *bad])


def test_user_environment_is_what_the_config_model_stored() -> None:
    """Every form a user may write reaches the agent as the model stored it: one mapping."""
    def env(value: object) -> dict[str, str]:
        stored = EnvironmentConfig.model_validate({"environment_variables": value})
        return spec_of({"environment": stored.model_dump(mode="json")}).environment_variables

    assert env({"A": "1", "B": 2, "C": True}) == {"A": "1", "B": "2", "C": "true"}
    assert env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    assert env({"cpu": ["A=1"], "cuda": ["A=1", "B=2"]}) == {"A": "1", "B": "2"}
    assert env(None) == {} and spec_of({}).environment_variables == {}


def test_epochal_variables_win_over_the_users(tmp_path: Path) -> None:
    config = {"environment": {"environment_variables": {
        "EPOCHAL_MASTER": "http://wrong", "PYTHONPATH": "/mine", "PATH": "/usr/bin", "X": "1"}}}
    env = trial_environment(spec_of(config), trial_info_path="/t/trial_info.json",
                            master_url="http://m")
    assert env["EPOCHAL_MASTER"] == "http://m"
    assert env["EPOCHAL_TRIAL_INFO"] == "/t/trial_info.json"
    launch = Launch(
        input=RunTrialInput(experiment_id=1, trial_id=1, run_id=1, hparams={}, config=config,
                            trial_seed=0, latest_checkpoint=None, steps_completed=0),
        spec=spec_of(config), run_dir=tmp_path, entrypoint="true", env=env)
    full = ProcessRuntime(kill_grace_seconds=1).environment(launch)
    assert full["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin"
    assert full["PYTHONPATH"] == f"{tmp_path / 'workdir'}{os.pathsep}/mine"
    assert full["X"] == "1" and full["PYTHONUNBUFFERED"] == "1"


def test_a_trial_inherits_no_secret_of_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("EPOCHAL_CLUSTER_TOKEN", "cluster-secret"),
                        ("AWS_SECRET_ACCESS_KEY", "cloud-secret"),
                        ("EPOCHAL_ADMIN_PASSWORD", "admin-secret"), ("LC_ALL", "C.UTF-8"),
                        ("HOME", "/home/agent"), ("https_proxy", "http://proxy:3128")):
        monkeypatch.setenv(name, value)
    launch = Launch(
        input=RunTrialInput(experiment_id=1, trial_id=1, run_id=1, hparams={}, config={},
                            trial_seed=0, latest_checkpoint=None, steps_completed=0),
        spec=spec_of(), run_dir=tmp_path, entrypoint="true", env={"MINE": "x"})
    env = ProcessRuntime(kill_grace_seconds=1).environment(launch)
    assert not any("secret" in value for value in env.values())
    assert env["LC_ALL"] == "C.UTF-8" and env["HOME"] == "/home/agent"
    assert env["https_proxy"] == "http://proxy:3128" and env["MINE"] == "x"


def test_kill_grace_and_exit_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHAL_KILL_GRACE_SECONDS", "2.5")
    assert kill_grace_from_env() == 2.5 and ProcessRuntime().kill_grace_seconds == 2.5
    monkeypatch.setenv("EPOCHAL_KILL_GRACE_SECONDS", "soon")
    assert kill_grace_from_env() == DEFAULT_KILL_GRACE_SECONDS
    monkeypatch.delenv("EPOCHAL_KILL_GRACE_SECONDS")
    assert kill_grace_from_env() == DEFAULT_KILL_GRACE_SECONDS == 10
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-15) == "killed by signal 15 (SIGTERM)"
    assert describe_exit(137).startswith("exited with code 137")
    assert "SIGKILL" in describe_exit(137)


def test_unwritable_checkpoint_storage_fails_the_run_naming_it(tmp_path: Path) -> None:
    from temporalio.exceptions import ApplicationError

    from agent_worker.trial_runs import check_storage_writable

    (tmp_path / "a-file").write_text("")
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "a-file"), "storage_path": "x"}
    with pytest.raises(ApplicationError) as raised:
        check_storage_writable(spec_of({"checkpoint_storage": storage}), "agent-7")
    assert raised.value.non_retryable
    assert raised.value.message == (
        f"the checkpoint storage {tmp_path}/a-file/x is not writable on agent agent-7: "
        "Not a directory")
    check_storage_writable(spec_of({"checkpoint_storage": {
        "type": "shared_fs", "host_path": str(tmp_path / "new")}}), "a")
    assert (tmp_path / "new").is_dir()


async def test_the_owner_is_asked_again_after_the_master_drops_the_connection(
        tmp_path: Path) -> None:
    """A connection the master closes as the agent's GET /me goes out (its keep-alive ending)
    loses the request; the agent asks again rather than failing the run."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        if connections > 1:
            body = b'{"user": {"id": 7, "username": "ann"}}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, httpx.AsyncClient() as http:
        acts = AgentActivities(agent_id="a", master_url=url, work_dir=tmp_path, http=http,
                               runtime=ProcessRuntime(), slots=SlotPool(cpu_slots(1)))
        assert await acts.experiment_owner(url, "ept.1.token") == {"id": 7, "username": "ann"}
    assert connections == 2


def test_a_traceback_is_an_error_and_its_exception_names_the_failure() -> None:
    """Every line of a Python traceback is shipped at ERROR (the dashboard's errors filter shows
    it), each rank's apart, and a failed run's message names the exception that ended the last."""
    seen = Tracebacks()
    lines = [
        ("stdout", "epoch 1 loss 0.5"),
        ("stderr", "[rank=0] Traceback (most recent call last):"),
        ("stderr", "[rank=1] step 3"),
        ("stderr", '[rank=0]   File "train.py", line 9, in <module>'),
        ("stderr", "[rank=0]     model.fit(lr=lr)"),
        ("stderr", "[rank=0]     ^^^^^^^^^^^^^^^^"),
        ("stderr", "[rank=0] ValueError: bad lr 7.0"),
        ("stderr", "[rank=0] cleaning up"),
    ]
    levels = [seen.level(stdtype, line) for stdtype, line in lines]
    error = "LOG_LEVEL_ERROR"
    assert levels == [None, error, None, error, error, error, error, None]
    assert seen.last_exception == "ValueError: bad lr 7.0"
    failed = naming_exception(ExitStatus(1, "exited with code 1"), seen.last_exception)
    assert failed.message == "exited with code 1 (raised ValueError: bad lr 7.0)"
    done = ExitStatus(0, "exited with code 0")
    assert naming_exception(done, seen.last_exception) is done
    assert naming_exception(ExitStatus(2, "exited with code 2"), None).message == (
        "exited with code 2")


async def test_the_shipper_sends_a_tracebacks_lines_at_error(
        master: FakeMaster, http: httpx.AsyncClient) -> None:
    s = shipper(master.url, http)
    s.start()
    s.add("stderr", "Traceback (most recent call last):")
    s.add("stderr", '  File "train.py", line 2, in <module>')
    s.add("stderr", "KeyError: 'lr'")
    s.add("stdout", "INFO: done")
    await s.close(timeout=10)
    with master.lock:
        levels = [e["level"] for e in master.logs]
    assert levels == [
        "LOG_LEVEL_ERROR", "LOG_LEVEL_ERROR", "LOG_LEVEL_ERROR", "LOG_LEVEL_INFO"]
    assert s.tracebacks.last_exception == "KeyError: 'lr'"

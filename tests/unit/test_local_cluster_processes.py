"""The process helpers of the local cluster: pid files, detached processes, failures."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from common import processes
from common.processes import ClusterError
from deploy.local_cluster import ClusterSettings, _up_process


def test_read_pid_removes_stale_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "run" / "x.pid"
    pid_file.parent.mkdir()
    pid_file.write_text("999999999\n")
    assert processes.read_pid(pid_file) is None
    assert not pid_file.exists()
    pid_file.write_text("not a pid\n")
    assert processes.read_pid(pid_file) is None
    assert not pid_file.exists()


def test_read_pid_ignores_a_process_younger_than_the_file(tmp_path: Path) -> None:
    """A reused pid (a process started after the pid file was written) is not ours."""
    proc = processes.spawn([sys.executable, "-c", "import time; time.sleep(30)"],
                           log_file=tmp_path / "x.log")
    try:
        pid_file = tmp_path / "x.pid"
        pid_file.write_text(f"{proc.pid}\n")
        old = time.time() - 3600
        os.utime(pid_file, (old, old))
        assert processes.read_pid(pid_file) is None
    finally:
        processes.stop_pid(proc.pid, grace=2)


def test_spawn_detaches_logs_and_stops(tmp_path: Path) -> None:
    log_file, pid_file = tmp_path / "logs" / "sleeper.log", tmp_path / "run" / "sleeper.pid"
    code = "import sys, time; print('hello from child', flush=True); time.sleep(60)"
    proc = processes.spawn([sys.executable, "-c", code], log_file=log_file, pid_file=pid_file)
    pid = processes.read_pid(pid_file)
    assert pid == proc.pid
    processes.wait_until(lambda: "hello from child" in processes.tail(log_file), part="sleeper",
                         log_file=log_file, timeout=10, pid=pid)
    assert "starting:" in log_file.read_text()
    assert processes.stop_pid_file(pid_file, grace=5)
    assert not processes.is_alive(pid)
    assert not pid_file.exists()
    assert not processes.stop_pid_file(pid_file)


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    log_file = tmp_path / "stubborn.log"
    proc = processes.spawn([sys.executable, "-c", code], log_file=log_file)
    processes.wait_until(lambda: "ready" in processes.tail(log_file), part="stubborn",
                         log_file=log_file, timeout=10, pid=proc.pid)
    started = time.monotonic()
    processes.stop_pid(proc.pid, grace=0.5)
    assert not processes.is_alive(proc.pid)
    assert time.monotonic() - started < 5


def test_wait_until_reports_a_dead_process_with_its_log(tmp_path: Path) -> None:
    log_file = tmp_path / "dies.log"
    code = "import sys; print('something went wrong: boom', flush=True); sys.exit(3)"
    proc = processes.spawn([sys.executable, "-c", code], log_file=log_file)
    with pytest.raises(ClusterError) as err:
        processes.wait_until(lambda: False, part="dies", log_file=log_file, timeout=20,
                             pid=proc.pid)
    message = str(err.value)
    assert message.startswith("dies: exited before it answered")
    assert str(log_file) in message
    assert "something went wrong: boom" in message


def test_wait_until_times_out(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"slow: did not answer within 0 s"):
        processes.wait_until(lambda: False, part="slow", log_file=tmp_path / "none.log",
                             timeout=0.3)


def test_tail_keeps_last_lines(tmp_path: Path) -> None:
    log_file = tmp_path / "long.log"
    log_file.write_text("".join(f"line {i}\n" for i in range(100)))
    last = processes.tail(log_file).splitlines()
    assert len(last) == processes.LOG_TAIL_LINES
    assert last[-1] == "line 99"
    assert processes.tail(tmp_path / "missing.log") == ""


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert processes.port_in_use(port)
    assert not processes.port_in_use(processes.free_port())


def test_part_that_exits_names_part_log_and_reason(tmp_state_dir: Path) -> None:
    settings = ClusterSettings(state_dir=tmp_state_dir, start_timeout=20)
    code = "import sys; print('No module named deploy.fake', file=sys.stderr); sys.exit(1)"
    with pytest.raises(ClusterError) as err:
        _up_process(settings, "master", [sys.executable, "-c", code], env={}, port=None,
                    check=lambda: False)
    message = str(err.value)
    assert message.startswith("master: exited before it answered")
    assert str(tmp_state_dir / "logs" / "master.log") in message
    assert "No module named deploy.fake" in message
    assert not (tmp_state_dir / "run" / "master.pid").exists() or processes.read_pid(
        tmp_state_dir / "run" / "master.pid") is None


def test_part_whose_port_is_taken(tmp_state_dir: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        settings = ClusterSettings(state_dir=tmp_state_dir, api_port=port)
        with pytest.raises(ClusterError, match=rf"master: port {port} .* already in use"):
            _up_process(settings, "master", [sys.executable, "-c", "pass"], env={}, port=port,
                        check=lambda: False)

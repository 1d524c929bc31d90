"""The processes of one trial working together: ``core.distributed``.

A trial on several slots runs one process per slot (``harness.launch.torch_distributed`` starts
them with torchrun), possibly on several agents. ``DistributedContext`` tells each process its
place (rank, local rank, size, ...) and offers the few collectives the Core API needs:
``gather``, ``allgather`` and ``broadcast`` of small picklable objects. Only the chief (rank 0)
talks to the master; the others learn its answers (``should_preempt``, a checkpoint's id) from
it.

The collectives go over TCP: the chief listens on a port the agent found free for the run
(trial info ``rendezvous.ports[1]``) and every other rank connects to it. A peer proves it
belongs to the run with an HMAC of the run's session token, which every part of the run (and
nobody else) holds; messages are length-prefixed pickles, exchanged only after that proof.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import pickle
import socket
import struct
import threading
import time
from typing import Any

from harness.core import _info

logger = logging.getLogger("harness.core")

CONNECT_TIMEOUT = 300.0  # ranks start at different times; the chief waits this long for all
MAX_MESSAGE = 256 << 20
_HEADER = struct.Struct("!Q")


class DistributedError(RuntimeError):
    """A collective failed: a peer left (its process ended) or never arrived."""


class DistributedContext:
    """One process's place in its trial and the collectives between the trial's processes.

    ``rank`` runs from 0 (the chief) to ``size - 1``; ``local_rank``/``local_size`` count the
    processes on this agent; ``cross_rank``/``cross_size`` count the agents (nodes).
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int = 0,
        local_size: int = 1,
        cross_rank: int = 0,
        cross_size: int = 1,
        chief_ip: str | None = None,
        port: int | None = None,
        secret: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank must be in [0, size), got rank={rank}, size={size}")
        if size > 1 and (chief_ip is None or port is None):
            raise ValueError("a DistributedContext of more than one process needs chief_ip and "
                             "port (on the cluster they come from the trial info)")
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self._chief_ip = chief_ip
        self._port = port
        self._key = (secret or "").encode()
        self._timeout = connect_timeout
        self._lock = threading.Lock()
        self._peers: dict[int, socket.socket] = {}  # the chief's: rank -> socket
        self._chief: socket.socket | None = None  # a worker's
        self._closed = False

    # -- Determined's accessors ---------------------------------------------------------------

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_torch_distributed(cls, info: _info.TrialInfo | None = None) -> DistributedContext:
        """The context of a process torchrun started (RANK, WORLD_SIZE, LOCAL_RANK, ...), with
        the chief's address and port from the trial info."""
        env = _info.torch_distributed_environment()
        if env is None:
            raise ValueError("RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE are not set: "
                             "start the script with python -m harness.launch.torch_distributed")
        info = info or _info.from_environment()
        chief_ip, port = _chief_address(info, env)
        return cls(**env, chief_ip=chief_ip, port=port,
                   secret=info.session_token if info is not None else None)

    # -- collectives -------------------------------------------------------------------------

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on the chief; None on the other ranks."""
        if self.size == 1:
            return [obj]
        with self._lock:
            self._connect()
            if self.is_chief:
                return [obj, *(self._receive(self._peers[r], r) for r in range(1, self.size))]
            assert self._chief is not None
            _send(self._chief, obj)
            return None

    def broadcast(self, obj: Any) -> Any:
        """The chief's ``obj``, on every rank."""
        if self.size == 1:
            return obj
        with self._lock:
            self._connect()
            if self.is_chief:
                for r in range(1, self.size):
                    self._send_to(r, obj)
                return obj
            assert self._chief is not None
            return self._receive(self._chief, 0)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order, on every rank."""
        gathered = self.gather(obj)
        result: list[Any] = self.broadcast(gathered)
        return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for sock in [*self._peers.values(), *([self._chief] if self._chief else [])]:
                sock.close()
            self._peers.clear()
            self._chief = None

    # -- transport ---------------------------------------------------------------------------

    def _send_to(self, rank: int, obj: Any) -> None:
        try:
            _send(self._peers[rank], obj)
        except OSError as err:
            raise DistributedError(f"rank {rank} left the trial ({err})") from err

    def _receive(self, sock: socket.socket, rank: int) -> Any:
        try:
            return _receive(sock)
        except (OSError, EOFError) as err:
            who = "the chief (rank 0)" if rank == 0 else f"rank {rank}"
            raise DistributedError(f"{who} left the trial ({err})") from err

    def _connect(self) -> None:
        if self._closed:
            raise DistributedError("the DistributedContext is closed")
        if self.is_chief and not self._peers:
            self._accept_all()
        elif not self.is_chief and self._chief is None:
            self._chief = self._dial()

    def _proof(self, rank: int) -> bytes:
        return hmac.new(self._key, f"epochal-rank-{rank}".encode(), hashlib.sha256).digest()

    def _accept_all(self) -> None:
        assert self._port is not None
        deadline = time.monotonic() + self._timeout
        with socket.create_server(("", self._port), reuse_port=False, backlog=self.size) as srv:
            while len(self._peers) < self.size - 1:
                srv.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    sock, _ = srv.accept()
                except TimeoutError:
                    missing = sorted(set(range(1, self.size)) - set(self._peers))
                    raise DistributedError(
                        f"ranks {missing} did not reach the chief within {self._timeout:.0f} s"
                    ) from None
                sock.settimeout(30)
                try:
                    hello = _read_exactly(sock, 4 + 32)
                except (OSError, EOFError):
                    sock.close()
                    continue
                rank = int.from_bytes(hello[:4], "big")
                if not (0 < rank < self.size) or rank in self._peers or not hmac.compare_digest(
                        hello[4:], self._proof(rank)):
                    logger.warning("refused a connection that is not a rank of this trial")
                    sock.close()
                    continue
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._peers[rank] = sock

    def _dial(self) -> socket.socket:
        assert self._chief_ip is not None and self._port is not None
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                sock = socket.create_connection((self._chief_ip, self._port), timeout=10)
                break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise DistributedError(
                        f"cannot reach the chief at {self._chief_ip}:{self._port} ({err})"
                    ) from err
                time.sleep(0.1)
        sock.sendall(self.rank.to_bytes(4, "big") + self._proof(self.rank))
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def _chief_address(
    info: _info.TrialInfo | None, env: dict[str, int]
) -> tuple[str | None, int | None]:
    if env["size"] == 1:
        return None, None
    rendezvous = info.rendezvous if info is not None else None
    if not rendezvous:
        raise ValueError("no rendezvous in the trial info: a DistributedContext of several "
                         "processes runs on the cluster")
    addrs = rendezvous.get("container_addrs") or ["127.0.0.1"]
    ports = rendezvous.get("ports") or []
    if len(ports) < 2:
        raise ValueError("the trial info's rendezvous names no port for the harness")
    chief = "127.0.0.1" if len(addrs) == 1 else str(addrs[0])
    return chief, int(ports[1])


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a collective's object pickles to {len(data)} bytes; at most "
                         f"{MAX_MESSAGE} are sent")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _receive(sock: socket.socket) -> Any:
    (length,) = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
    if length > MAX_MESSAGE:
        raise DistributedError(f"a peer sent {length} bytes; at most {MAX_MESSAGE} are taken")
    return pickle.loads(_read_exactly(sock, length))  # noqa: S301 (authenticated peers only)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(min(count - len(chunks), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks += chunk
    return bytes(chunks)


def single() -> DistributedContext:
    """The context of a trial that is one process."""
    return DistributedContext(rank=0, size=1)


__all__ = ["DistributedContext", "DistributedError"]

"""Registering with the master (`PUT /api/v1/agents/{agentId}`), repeated as a heartbeat.

An agent waits for its master as long as it takes, and a master that goes away later is
logged and retried, never fatal.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from importlib import metadata
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import psutil

from agent_worker.slots import Slot
from common.registration_limits import MAX_ADDRESSES, MAX_RUN_PORTS

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# While the master is away, say so at most this often.
FAILURE_LOG_SECONDS = 60.0


def agent_version() -> str:
    try:
        return metadata.version("epochal")
    except metadata.PackageNotFoundError:
        return "0.1.0"


def route_address(master_url: str) -> str:
    """This host's address on its route to the master: where the agents of the master's network
    reach this one's trials (`--advertise-address` overrides it). No packet is sent."""
    host = urlsplit(master_url).hostname or "127.0.0.1"
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def host_addresses(advertised: str) -> list[str]:
    """Every address other hosts may reach this one at: the advertised one and each interface's
    (not loopback, nor IPv6 link-local, which needs an interface to mean anything)."""
    found = set()
    for address in [advertised, *(entry.address for entries in psutil.net_if_addrs().values()
                                  for entry in entries
                                  if entry.family in (socket.AF_INET, socket.AF_INET6))]:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:  # a host name advertised: its addresses are among the interfaces'
            continue
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
            found.add(str(ip))
    return sorted(found)[:MAX_ADDRESSES]


class Registration:
    def __init__(
        self,
        http: httpx.AsyncClient,
        master_url: str,
        *,
        agent_id: str,
        resource_pool: str,
        slots: list[Slot],
        interval: float = HEARTBEAT_SECONDS,
        boot_id: str = "",
        address: str = "",
    ) -> None:
        self._http = http
        self._master_url = master_url.rstrip("/")
        self.agent_id = agent_id
        self.resource_pool = resource_pool
        self.slots = slots
        self.interval = interval
        self.boot_id = boot_id  # new on every agent start: the master tells the pool once per boot
        self.address = address
        # Its runs' listening ports (port, uid) and its host's addresses, told with every beat;
        # the ports of other agents' runs (address, port, uid), as the last answer told them.
        self.run_ports: list[tuple[int, int]] = []
        self.addresses: list[str] = []
        self.peer_run_ports: set[tuple[str, int, int]] = set()
        self.registered = False
        self._failing_since: float | None = None
        self._last_failure_log = 0.0

    @property
    def url(self) -> str:
        return f"{self._master_url}/api/v1/agents/{quote(self.agent_id, safe='')}"

    def body(self) -> dict[str, Any]:
        return {
            "resourcePool": self.resource_pool,
            "slots": [slot.to_api() for slot in self.slots],
            "version": agent_version(),
            "bootId": self.boot_id,
            "address": self.address,
            "runPorts": [{"port": port, "uid": uid}
                         for port, uid in self.run_ports[:MAX_RUN_PORTS]],
            "addresses": self.addresses,
        }

    async def register_once(self) -> bool:
        """One PUT; True when the master took it. Failures are logged, never raised."""
        try:
            resp = await self._http.put(self.url, json=self.body(), timeout=10.0)
        except httpx.HTTPError as err:
            self._failed(f"{type(err).__name__}: {err}")
            return False
        if not resp.is_success:
            self._failed(f"HTTP {resp.status_code}: {resp.text[:300]}")
            return False
        try:
            self.peer_run_ports = {(str(p["address"]), int(p["port"]), int(p["uid"]))
                                   for p in resp.json().get("runPorts") or []}
        except (ValueError, TypeError, KeyError, AttributeError):
            logger.warning("the master's answer to registration lists no run ports: %.300s",
                           resp.text)
        if not self.registered:
            logger.info("registered agent %s with %d slots in pool %r at %s", self.agent_id,
                        len(self.slots), self.resource_pool, self._master_url)
        elif self._failing_since is not None:
            logger.info("the master answers again after %.0f s",
                        time.monotonic() - self._failing_since)
        self.registered = True
        self._failing_since = None
        return True

    def _failed(self, why: str) -> None:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if self._last_failure_log == 0.0 or now - self._last_failure_log >= FAILURE_LOG_SECONDS:
            self._last_failure_log = now
            logger.warning("cannot register agent %s with the master at %s (%s); retrying",
                           self.agent_id, self._master_url, why)
        else:
            logger.debug("registration failed: %s", why)

    async def wait_registered(self) -> None:
        """Retry until the master takes the registration (1 s, 2 s, ... 5 s apart)."""
        delay = min(1.0, self.interval)
        while not await self.register_once():
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.interval)

    async def heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.register_once()

    async def cluster_id(self) -> str | None:
        """The master's `clusterId` (for trial info); None when it cannot be had."""
        try:
            resp = await self._http.get(f"{self._master_url}/api/v1/master", timeout=10.0)
            resp.raise_for_status()
            value = resp.json().get("clusterId")
        except (httpx.HTTPError, ValueError, AttributeError) as err:
            logger.warning("cannot read the master's cluster id: %s", err)
            return None
        return str(value) if value else None

"""Registering with the master (`PUT /api/v1/agents/{agentId}`), repeated as a heartbeat.

An agent waits for its master as long as it takes, and a master that goes away later is
logged and retried, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from importlib import metadata
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from agent_worker.slots import Slot

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

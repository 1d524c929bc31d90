"""Other machines, made of Linux network namespaces: each "host" has its own network stack
(`ip netns`), joined to this one by a veth pair on a bridge, so it reaches the cluster only by
IP address, and its link can be cut (`ip link set ... down`) as a cable or switch fails.

Needs root and iproute2 (CI runs as root); `HostNetwork.available()` says why not otherwise.
Names carry this process's id, so two suites on one machine do not meet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _forward(action: str, bridge: str) -> None:
    """Let the hosts reach each other across the bridge (`-I`), as machines on one LAN do, or
    stop (`-D`): with bridged traffic passed to iptables (br_netfilter, which Docker loads),
    Docker's FORWARD policy drops it otherwise."""
    if shutil.which("iptables") is not None:
        subprocess.run(["iptables", "-w", "5", action, "FORWARD", "-i", bridge, "-o", bridge,
                        "-j", "ACCEPT"], capture_output=True, timeout=30, check=False)


@dataclass(frozen=True)
class Host:
    """One namespace: `name` for `ip netns exec`, `address` its IP, `link` the veth end on the
    bridge side (down: the host is cut off)."""

    name: str
    address: str
    link: str

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's network."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def reconnect(self) -> None:
        _ip("link", "set", self.link, "up")

    def pids(self) -> set[int]:
        """The processes living in this host's network."""
        out = _ip("netns", "pids", self.name, check=False).stdout
        return {int(p) for p in out.split()}


class HostNetwork:
    """A bridge on 10.N.0.0/24 with this machine at 10.N.0.1, and `add()`ed hosts after it."""

    def __init__(self) -> None:
        tag = os.getpid() % 100_000
        self.prefix = f"ep{tag}"
        self.subnet = f"10.{200 + tag % 50}.{tag % 250}"
        self.bridge = f"{self.prefix}br"
        self.gateway = f"{self.subnet}.1"
        self.hosts: list[Host] = []

    @staticmethod
    def available() -> str | None:
        """None if namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "network namespaces need iproute2's `ip`"
        return None

    def __enter__(self) -> HostNetwork:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _forward("-I", self.bridge)
        return self

    def add(self) -> Host:
        index = len(self.hosts) + 1
        host = Host(f"{self.prefix}h{index}", f"{self.subnet}.{10 + index}",
                    f"{self.prefix}v{index}")
        inside = f"{host.link}i"
        _ip("netns", "add", host.name)
        _ip("link", "add", host.link, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", host.name)
        _ip("link", "set", host.link, "master", self.bridge)
        _ip("link", "set", host.link, "up")
        for args in (("addr", "add", f"{host.address}/24", "dev", inside),
                     ("link", "set", inside, "up"), ("link", "set", "lo", "up")):
            _ip("netns", "exec", host.name, "ip", *args)
        self.hosts.append(host)
        return host

    def __exit__(self, *_exc: object) -> None:
        for host in self.hosts:
            for pid in host.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            _ip("netns", "del", host.name, check=False)
            _ip("link", "del", host.link, check=False)
        _forward("-D", self.bridge)
        _ip("link", "del", self.bridge, check=False)

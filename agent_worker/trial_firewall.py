"""Firewall rules that keep trials away from services that trust whoever reaches them.

Temporal's frontend (and its web UI) authenticate nobody unless mTLS or an API key is set up,
and a trial shares the host's network: it could signal or terminate other users' workflows, or
poll an agent's task queue. An agent with a task user adds, for that user's uid, one iptables
rule per such address that resets the connection (`-m owner --uid-owner`), tagged with the
agent's id, and removes its rules when it stops; rules a crashed agent left are found by their
tag and reused. Other users of the host, the agent and the master are not affected.
"""

from __future__ import annotations

import ipaddress
import logging
import shutil
import socket
import subprocess

logger = logging.getLogger(__name__)


class TrialFirewall:
    """The rules of one agent: `addresses` (host:port) closed to `uid`."""

    def __init__(self, uid: int, addresses: list[str], agent_id: str) -> None:
        self.uid = uid
        self.addresses = addresses
        self.tag = f"epochal-agent:{agent_id}"[:250]
        self.installed: list[tuple[str, list[str]]] = []

    def rules(self) -> list[tuple[str, list[str]]]:
        """(tool, rule) per resolved IP address and port."""
        found: list[tuple[str, list[str]]] = []
        for address in self.addresses:
            host, _, port = address.rpartition(":")
            host = host.strip("[]")
            for ip in _resolve(host):
                tool = "iptables" if ip.version == 4 else "ip6tables"
                found.append((tool, [
                    "OUTPUT", "-p", "tcp", "-d", str(ip), "--dport", port,
                    "-m", "owner", "--uid-owner", str(self.uid),
                    "-m", "comment", "--comment", self.tag,
                    "-j", "REJECT", "--reject-with", "tcp-reset"]))
        return found

    def install(self) -> None:
        """Add the rules that are not there yet; where it cannot, say so."""
        rules = self.rules()
        missing = sorted({tool for tool, _ in rules if shutil.which(tool) is None})
        if missing:
            logger.warning("%s not found: trials can reach %s, which authenticate nobody; "
                           "firewall them from uid %d (docs/SECURITY.md)", " and ".join(missing),
                           ", ".join(self.addresses), self.uid)
            return
        for tool, rule in rules:
            if _iptables(tool, "-C", rule) or _iptables(tool, "-I", rule):
                self.installed.append((tool, rule))
            else:
                logger.warning("cannot add a %s rule closing %s to uid %d: trials can reach it",
                               tool, rule[rule.index("-d") + 1], self.uid)
        if self.installed:
            logger.info("trials (uid %d) cannot connect to %s", self.uid,
                        ", ".join(self.addresses))

    def remove(self) -> None:
        for tool, rule in self.installed:
            while _iptables(tool, "-D", rule):
                pass
        self.installed = []


def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as err:
        logger.warning("cannot resolve %s (%s): trials are not kept from it", host, err)
        return []
    return sorted({ipaddress.ip_address(str(info[4][0])) for info in infos}, key=str)


def _iptables(tool: str, action: str, rule: list[str]) -> bool:
    try:
        done = subprocess.run([tool, "-w", "5", action, *rule], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0

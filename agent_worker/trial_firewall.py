"""Firewall rules that keep trials away from services that trust whoever reaches them.

Temporal (its frontend, HTTP API, UI and internal services) authenticates nobody unless mTLS or
an API key is set up, and a trial shares the host's network: it could signal or terminate other
users' workflows, or poll an agent's task queue. The local cluster's other servers (PostgreSQL,
SeaweedFS's master, volume server and filer) are no trial's business either. An agent with a
task user adds, for that user's uid, one iptables rule per such address (host:port, the ones
given with `--close-to-trials` and Temporal's) that resets the connection
(`-m owner --uid-owner`); 0.0.0.0:PORT (or [::]:PORT), a server listening on every address,
closes the port on every address of this host (`-m addrtype --dst-type LOCAL`). The rules are
tagged with the agent's id and its master, and removed when the agent stops. Rules a killed
agent left are found by their tag when it starts again: those it still wants are kept, the rest
(a Temporal server since moved to another port) removed, since a port closed to trials for good
breaks whatever later listens there (a distributed trial's rendezvous hung on one). Other users
of the host, the agent and the master are not affected.

Runs' own ports are closed to every run identity but their owner's (so the ranks of one
distributed trial still reach each other): the ports a run is given (a task's service, a
trial's rendezvous) before it starts, and any other it listens on (gloo's pair connections, a
user's debug server) once `close_listeners` sees it, within a scan of /proc/net/tcp; a
connection made before that is reset at its next packet. Other hosts' runs are held off the
same way on their own hosts: each agent tells the master its runs' ports in its registration
heartbeat and is told every other agent's (`close_peer_ports`), so a port is closed across the
cluster within a heartbeat of its opening.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import shlex
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

# A rule's destination: every address of this host (a server bound to 0.0.0.0 or [::]).
EVERY_LOCAL_ADDRESS = ["-m", "addrtype", "--dst-type", "LOCAL"]
LISTEN = "0A"  # a listening socket's state in /proc/net/tcp (include/net/tcp_states.h)


class TrialFirewall:
    """The rules of one agent: `addresses` (host:port) closed to `uids` (each a uid or an
    inclusive range `low-high`: the task user, and the range of users' own identities)."""

    def __init__(self, uids: int | str | list[int | str], addresses: list[str], agent_id: str,
                 master_url: str) -> None:
        self.uids = [str(u) for u in (uids if isinstance(uids, list) else [uids])]
        self.addresses = list(dict.fromkeys(addresses))
        self.tag = rule_tag(agent_id, master_url)
        self.installed: list[tuple[str, list[str]]] = []
        # close_listeners' rules per (port, uid); the lock keeps a scan or a heartbeat's
        # answer, handled in a thread, from adding rules after `remove`.
        self.listener_rules: dict[tuple[int, int], list[tuple[str, list[str]]]] = {}
        # close_peer_ports' rules per (address, port, uid) of other agents' runs.
        self.peer_rules: dict[tuple[str, int, int], list[tuple[str, list[str]]]] = {}
        self._lock = threading.Lock()
        self._removed = False

    @property
    def uid(self) -> str:
        """The uids closed out, for messages."""
        return ",".join(self.uids)

    def _reject(self, to: list[str], port: str, owners: list[str]) -> list[str]:
        """A rule resetting TCP connections to `to`:`port` from processes `owners` matches."""
        return ["OUTPUT", "-p", "tcp", *to, "--dport", port, *owners,
                "-m", "comment", "--comment", self.tag,
                "-j", "REJECT", "--reject-with", "tcp-reset"]

    def rules(self) -> list[tuple[str, list[str]]]:
        """(tool, rule) per resolved IP address and port."""
        found: list[tuple[str, list[str]]] = []
        for address in self.addresses:
            host, _, port = address.rpartition(":")
            host = host.strip("[]")
            for ip in _resolve(host):
                tool = "iptables" if ip.version == 4 else "ip6tables"
                to = (EVERY_LOCAL_ADDRESS if ip.is_unspecified
                      else ["-d", str(ip)])
                found.extend((tool, self._reject(to, port, ["-m", "owner", "--uid-owner", uid]))
                             for uid in self.uids)
        return found

    def install(self) -> None:
        """Add the rules that are not there yet; where it cannot, say so."""
        rules = self.rules()
        missing = sorted({tool for tool, _ in rules if shutil.which(tool) is None})
        if missing:
            logger.warning("%s not found: trials can reach %s, which authenticate nobody; "
                           "firewall them from uid %s (docs/SECURITY.md)", " and ".join(missing),
                           ", ".join(self.addresses), self.uid)
            return
        for tool, rule in rules:
            if _iptables(tool, "-C", rule) or _iptables(tool, "-I", rule):
                self.installed.append((tool, rule))
            else:
                address, port, _ = _closes(rule)
                logger.warning("cannot add a %s rule closing %s port %s to uid %s: trials can "
                               "reach it", tool, address, port, self.uid)
        if self.installed:
            logger.info("trials (uid %s) cannot connect to %s", self.uid,
                        ", ".join(self.addresses))
        wanted = {(tool, _closes(rule)) for tool, rule in rules}
        legacy = self.tag.split(" ")[0]  # before 2026-11: the agent's id alone
        for tool in sorted({tool for tool, _ in rules}):
            for rule in tagged_rules(tool, lambda tag: tag in (self.tag, legacy)):
                if (tool, _closes(rule)) not in wanted or legacy in rule:
                    _iptables(tool, "-D", rule)
                    logger.info("removed a rule this agent left in an earlier life: %s",
                                " ".join(rule))

    def holds(self, uid: int) -> bool:
        """Whether the rules hold `uid` (a run identity)."""
        return any(_holds(spec, uid) for spec in self.uids)

    def include(self, uid: int) -> None:
        """Hold runs of `uid` to the same rules from now on: an identity outside the ranges
        given (an agent user an admin linked a user with)."""
        with self._lock:
            if self.holds(uid):
                return
            self.uids.append(str(uid))
            for tool, rule in self.rules():
                if rule[rule.index("--uid-owner") + 1] == str(uid) and shutil.which(tool) and (
                        _iptables(tool, "-C", rule) or _iptables(tool, "-I", rule)):
                    self.installed.append((tool, rule))
            # The runs' ports closed so far, closed to it too.
            for (port, owner), rules in self.listener_rules.items():
                rules.extend(rule for tool in ("iptables", "ip6tables")
                             for rule in self._close_to_others(
                                 tool, EVERY_LOCAL_ADDRESS, port, owner,
                                 [str(uid)]))
            for (address, port, owner), rules in self.peer_rules.items():
                rules.extend(self._close_to_others(_tool(address), ["-d", address], port, owner,
                                                   [str(uid)]))

    def close_to_other_users(self, port: int, owner_uid: int) -> list[tuple[str, list[str]]]:
        """Close `port` of this host (a run's service, its rendezvous) to every run identity
        but its owner's, while the run lasts; the rules, for `drop`. The master's proxy and
        the agent are not run identities: they still reach it."""
        return [rule for tool in ("iptables", "ip6tables") for rule in self._close_to_others(
            tool, EVERY_LOCAL_ADDRESS, port, owner_uid)]

    def _close_to_others(self, tool: str, to: list[str], port: int, owner_uid: int,
                         specs: list[str] | None = None) -> list[tuple[str, list[str]]]:
        """The rules added closing `to`:`port` to the run identities (`specs`: uids or ranges,
        else all the firewall holds) but `owner_uid`."""
        if shutil.which(tool) is None:
            return []
        added = []
        for spec in specs or self.uids:
            rule = self._reject(to, str(port), ["-m", "owner", "--uid-owner", spec,
                                                "-m", "owner", "!", "--uid-owner", str(owner_uid)])
            if _iptables(tool, "-I", rule):
                added.append((tool, rule))
            else:
                logger.warning("cannot close port %d to other users' runs (%s)", port, tool)
        return added

    def close_listeners(self, listening: set[tuple[int, int]]) -> bool:
        """Close each port a run identity listens on (`listening`: (port, uid), as `listeners`
        finds them) to the other run identities; drop the rules of those no longer listening.
        Whether the ports held changed (other agents are told: `held_listeners`)."""
        with self._lock:
            if self._removed:
                return False
            before = set(self.listener_rules)
            for gone in before - listening:
                self.drop(self.listener_rules.pop(gone))
            for port, uid in sorted(listening - before):
                if self.holds(uid):
                    self.listener_rules[(port, uid)] = self.close_to_other_users(port, uid)
            return set(self.listener_rules) != before

    def held_listeners(self) -> list[tuple[int, int]]:
        """(port, uid) of each port a run identity listens on here, as last seen."""
        with self._lock:
            return sorted(self.listener_rules)

    def close_peer_ports(self, ports: set[tuple[str, int, int]]) -> None:
        """Close each port a run on another agent's host listens on (`ports`: (address, port,
        uid), one per address of that host, as the master tells them) to this host's run
        identities but its owner's; drop the rules of those no longer listed."""
        with self._lock:
            if self._removed:
                return
            for gone in set(self.peer_rules) - ports:
                self.drop(self.peer_rules.pop(gone))
            for address, port, uid in sorted(ports - set(self.peer_rules)):
                if _tool(address):
                    self.peer_rules[(address, port, uid)] = self._close_to_others(
                        _tool(address), ["-d", address], port, uid)

    @staticmethod
    def drop(rules: list[tuple[str, list[str]]]) -> None:
        """Remove `rules`, one copy per entry: a port closed twice (its run was given it, and
        `close_listeners` saw it listened on) stays closed until both let it go."""
        for tool, rule in rules:
            _iptables(tool, "-D", rule)

    def remove(self) -> None:
        with self._lock:
            self._removed = True
            self.drop([*self.installed, *(rule for rules in (*self.listener_rules.values(),
                                                             *self.peer_rules.values())
                                          for rule in rules)])
            self.installed, self.listener_rules, self.peer_rules = [], {}, {}


def rule_tag(agent_id: str, master_url: str) -> str:
    """The comment on an agent's rules: its id and its master's address, since agents of two
    clusters on one host (or of the test suite's clusters) may share an id."""
    return f"epochal-agent:{agent_id} {master_url}"[:250]


def remove_rules_of_master(master_url: str) -> int:
    """Remove the rules every agent of the master at `master_url` left on this host (agents
    killed without a chance to remove theirs); how many were removed."""
    suffix = f" {master_url}"
    removed = 0
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for rule in tagged_rules(tool, lambda tag: tag.startswith("epochal-agent:")
                                 and tag.endswith(suffix)):
            removed += _iptables(tool, "-D", rule)
    return removed


def tagged_rules(tool: str, wanted: Callable[[str], bool]) -> list[list[str]]:
    """The OUTPUT rules whose comment `wanted` accepts, each as `-D` takes it."""
    try:
        listed = subprocess.run([tool, "-w", "5", "-S", "OUTPUT"], capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in listed.stdout.splitlines():
        words = shlex.split(line)
        if words[:2] != ["-A", "OUTPUT"] or "--comment" not in words[:-1]:
            continue
        if wanted(words[words.index("--comment") + 1]):
            found.append(["OUTPUT", *words[2:]])
    return found


def listeners(proc: Path = Path("/proc/net")) -> set[tuple[int, int]]:
    """(port, uid) of every TCP socket listening in this network namespace, the host's (trials
    and containers share it)."""
    found: set[tuple[int, int]] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[3] == LISTEN:
                found.add((int(fields[1].rpartition(":")[2], 16), int(fields[7])))
    return found


def _closes(rule: list[str]) -> tuple[str, str, str]:
    """(address, port, uid) a rule closes, however iptables spells it (-S adds a /32); the
    address is LOCAL for every address of this host."""
    def value(flag: str) -> str:
        return rule[rule.index(flag) + 1] if flag in rule[:-1] else ""
    address = value("-d") or value("--dst-type")
    with contextlib.suppress(ValueError):
        address = str(ipaddress.ip_network(address, strict=False).network_address)
    return address, value("--dport"), value("--uid-owner")


def _tool(address: str) -> str:
    """The tool of an IP address's rules ("" for no IP address)."""
    try:
        return "iptables" if ipaddress.ip_address(address).version == 4 else "ip6tables"
    except ValueError:
        return ""


def _holds(spec: str, uid: int) -> bool:
    """Whether `uid` is the uid or in the range `low-high` that `spec` names."""
    low, _, high = spec.partition("-")
    return int(low) <= uid <= int(high or low)


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

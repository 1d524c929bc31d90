"""The agent's firewall rules on this host's real iptables: a killed agent's rules do not close a
port for good; a server listening on every address is closed on every address. Each test tags
its rules with a master address of its own, so agents of other tests' clusters (which share this
host's iptables) are not touched."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_worker.trial_firewall import (
    TrialFirewall,
    _iptables,
    listeners,
    remove_rules_of_master,
    rule_tag,
    tagged_rules,
)
from common.processes import free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("iptables") is None
    or not _iptables("iptables", "-S", ["OUTPUT"]),
    reason="needs root and iptables")

TASK_UID = 65534


@pytest.fixture
def master() -> Iterator[str]:
    url = f"http://firewall-test-{uuid.uuid4().hex[:8]}:8080"
    yield url
    remove_rules_of_master(url)


def closed_ports(agent_id: str, master: str) -> list[str]:
    tag = rule_tag(agent_id, master)
    rules = tagged_rules("iptables", lambda t: t == tag)
    return sorted(rule[rule.index("--dport") + 1] for rule in rules)


def test_an_agent_that_starts_again_drops_the_rules_of_a_port_it_no_longer_closes(
    master: str,
) -> None:
    killed = TrialFirewall(TASK_UID, ["127.0.0.1:41001", "127.0.0.1:41002"], "agent-1", master)
    killed.install()  # and never removed: the agent was killed
    assert closed_ports("agent-1", master) == ["41001", "41002"]

    again = TrialFirewall(TASK_UID, ["127.0.0.1:41002", "127.0.0.1:41003"], "agent-1", master)
    again.install()
    assert closed_ports("agent-1", master) == ["41002", "41003"]
    again.remove()
    assert closed_ports("agent-1", master) == []


def test_agents_of_one_id_under_two_masters_keep_their_own_rules(master: str) -> None:
    other_master = f"{master}0"
    try:
        TrialFirewall(TASK_UID, ["127.0.0.1:41011"], "agent-2", other_master).install()
        TrialFirewall(TASK_UID, ["127.0.0.1:41012"], "agent-2", master).install()
        assert closed_ports("agent-2", other_master) == ["41011"]
        assert closed_ports("agent-2", master) == ["41012"]
        assert remove_rules_of_master(master) == 1
        assert closed_ports("agent-2", master) == []
        assert closed_ports("agent-2", other_master) == ["41011"]
    finally:
        remove_rules_of_master(other_master)


def test_a_rule_tagged_the_old_way_is_replaced(master: str) -> None:
    agent_id = f"agent-{uuid.uuid4().hex[:8]}"
    legacy = f"epochal-agent:{agent_id}"
    old_rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", "41021", "-m", "owner",
                "--uid-owner", str(TASK_UID), "-m", "comment", "--comment", legacy,
                "-j", "REJECT", "--reject-with", "tcp-reset"]
    assert _iptables("iptables", "-I", old_rule)
    try:
        firewall = TrialFirewall(TASK_UID, ["127.0.0.1:41021"], agent_id, master)
        firewall.install()
        assert tagged_rules("iptables", lambda t: t == legacy) == []
        assert closed_ports(agent_id, master) == ["41021"]
    finally:
        while _iptables("iptables", "-D", old_rule):
            pass


def connects_as_task_user(host: str, port: int, uid: int = TASK_UID) -> bool:
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=10).close()"
    done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}",
                           "--clear-groups", sys.executable, "-c", probe],
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_a_port_of_every_address_is_closed_on_every_address_of_this_host(master: str) -> None:
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        assert connects_as_task_user("127.0.0.2", port)
        firewall = TrialFirewall(TASK_UID, [f"0.0.0.0:{port}", f"0.0.0.0:{port}"], "agent-3",
                                 master)
        firewall.install()
        try:
            assert closed_ports("agent-3", master) == [str(port)]
            for host in ("127.0.0.1", "127.0.0.2"):
                assert not connects_as_task_user(host, port), host
            socket.create_connection(("127.0.0.1", port), timeout=10).close()  # others can
            # The agent started again keeps the rule it still wants, once.
            TrialFirewall(TASK_UID, [f"0.0.0.0:{port}"], "agent-3", master).install()
            assert closed_ports("agent-3", master) == [str(port)]
        finally:
            firewall.remove()
        assert closed_ports("agent-3", master) == []
        assert connects_as_task_user("127.0.0.2", port)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_each_users_runs_are_held_and_a_runs_port_answers_its_own_user_only(
        master: str) -> None:
    from agent_worker.sandbox import RUN_ID_BASE, RUN_ID_RANGE

    alice, bob, linked = RUN_ID_BASE + 7, RUN_ID_BASE + 8, 4321
    with socket.socket() as closed, socket.socket() as board:
        for listener in (closed, board):
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
        closed_port, board_port = closed.getsockname()[1], board.getsockname()[1]
        firewall = TrialFirewall([TASK_UID, RUN_ID_RANGE], [f"127.0.0.1:{closed_port}"],
                                 "agent-4", master)
        firewall.install()
        try:
            for uid in (TASK_UID, alice, bob):
                assert not connects_as_task_user("127.0.0.1", closed_port, uid), uid
            assert connects_as_task_user("127.0.0.1", closed_port, linked)
            firewall.include(linked)  # a user linked with an agent user outside the range
            assert not connects_as_task_user("127.0.0.1", closed_port, linked)
            firewall.include(alice)  # in the range already: nothing added
            assert firewall.uids == [str(TASK_UID), RUN_ID_RANGE, str(linked)]
            # Alice's TensorBoard: hers alone while it runs; root (the proxy) still reaches it.
            rules = firewall.close_to_other_users(board_port, alice)
            assert connects_as_task_user("127.0.0.1", board_port, alice)
            for uid in (bob, linked, TASK_UID):
                assert not connects_as_task_user("127.0.0.1", board_port, uid), uid
            socket.create_connection(("127.0.0.1", board_port), timeout=10).close()
            firewall.drop(rules)
            assert connects_as_task_user("127.0.0.1", board_port, bob)
        finally:
            firewall.remove()
        assert closed_ports("agent-4", master) == []


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_a_port_a_run_opens_itself_answers_its_own_user_only(master: str) -> None:
    # Identities of a range no agent holds: agents of other tests' clusters on this host close
    # the ports their run identities listen on too.
    alice, bob = 1_900_000_009, 1_900_000_010
    serve = ("import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
             "print(s.getsockname()[1], flush=True); sys.stdin.read()")
    server = subprocess.Popen(["setpriv", f"--reuid={alice}", f"--regid={alice}",
                               "--clear-groups", sys.executable, "-c", serve],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    firewall = TrialFirewall([TASK_UID, "1900000000-1900000099"], [], "agent-5", master)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        assert (port, alice) in listeners()
        assert connects_as_task_user("127.0.0.1", port, bob)
        # Other tests' runs listen on this host too: this test's firewall closes Alice's only.
        alices = {(p, uid) for p, uid in listeners() if uid == alice}
        firewall.close_listeners(alices)
        assert not connects_as_task_user("127.0.0.1", port, bob)
        assert connects_as_task_user("127.0.0.1", port, alice)
        socket.create_connection(("127.0.0.1", port), timeout=10).close()  # the agent can
        firewall.include(4323)  # a linked user's first run here, after the port was closed
        assert not connects_as_task_user("127.0.0.1", port, 4323)
        # Given to her run as well (a service port): closed until both let it go.
        given = firewall.close_to_other_users(port, alice)
        firewall.close_listeners(set())
        assert not connects_as_task_user("127.0.0.1", port, bob)
        firewall.drop(given)
        assert connects_as_task_user("127.0.0.1", port, bob)
        firewall.close_listeners(alices)
        server.communicate("", timeout=30)  # it stops listening
        firewall.close_listeners({(p, uid) for p, uid in listeners() if uid == alice})
        assert closed_ports("agent-5", master) == []
    finally:
        server.kill()
        server.wait()
        firewall.remove()
    assert closed_ports("agent-5", master) == []


def test_cluster_down_removes_the_rules_its_killed_agents_left(tmp_path: Path) -> None:
    from deploy.local_cluster import ClusterSettings, cluster_info, down

    settings = ClusterSettings(state_dir=tmp_path / "state", api_port=free_port())
    master = cluster_info(settings).api_url
    try:
        TrialFirewall(TASK_UID, ["127.0.0.1:41031"], "local-agent", master).install()  # killed
        assert closed_ports("local-agent", master) == ["41031"]
        assert down(settings) == []  # nothing was running
        assert closed_ports("local-agent", master) == []
    finally:
        remove_rules_of_master(master)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_a_port_of_another_hosts_run_answers_its_own_user_only(master: str) -> None:
    alice, bob = 1_900_000_011, 1_900_000_012  # as above: a range no agent holds
    with socket.socket() as listener:  # Alice's run on the other host, as the master tells it
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        firewall = TrialFirewall([TASK_UID, "1900000000-1900000099"], [], "agent-6", master)
        try:
            firewall.close_peer_ports({("127.0.0.1", port, alice), ("not-an-ip", port, alice)})
            assert closed_ports("agent-6", master) == [str(port)] * 2  # one per identity spec
            assert not connects_as_task_user("127.0.0.1", port, bob)
            assert connects_as_task_user("127.0.0.1", port, alice)
            # A user linked with an agent user, whose first run here starts after: held too.
            linked = 4322
            assert connects_as_task_user("127.0.0.1", port, linked)
            firewall.include(linked)
            assert not connects_as_task_user("127.0.0.1", port, linked)
            firewall.close_peer_ports(set())  # it stopped listening there
            assert closed_ports("agent-6", master) == []
            assert connects_as_task_user("127.0.0.1", port, bob)
            firewall.close_peer_ports({("127.0.0.1", port, alice)})
        finally:
            firewall.remove()
        assert closed_ports("agent-6", master) == []

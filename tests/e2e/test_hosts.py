"""A cluster across hosts: three agents, each in its own network namespace with its own work
directory, reach the master, Temporal and S3 only by IP address (`epochal cluster up --host`),
and share nothing else: checkpoints are in S3, the model definition comes over the API.

A grid search spreads over the three hosts; a host whose link is cut mid-trial loses its trial
to another host, which resumes it from its S3 checkpoint; when the link comes back the old run
is fenced (its reports are refused) and stopped, so the trial never runs twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
import pytest
import yaml

from common.processes import free_port_block
from deploy.s3_server import PORT_BLOCK
from tests.e2e.cluster import (
    FAST_AGENT_TIMEOUT,
    Cluster,
    SecondAgent,
    script_experiment,
    shared_servers_cluster,
)
from tests.e2e.hosts import Host, HostNetwork
from tests.e2e.test_faults import create, trials, wait_done
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(HostNetwork.available() is not None,
                                 reason=str(HostNetwork.available()))]


@pytest.fixture(scope="module")
def network() -> Iterator[HostNetwork]:
    with HostNetwork() as net:
        for _ in range(3):
            net.add()
        yield net


# An agent the pool lost (its host cut off) registers again 15 s after it notices instead of 60
# (--rejoin-after): three times the pool's liveness timeout under FAST_AGENT_TIMEOUT.
FAST_REJOIN = {"EPOCHAL_AGENT_REJOIN_SECONDS": "15"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, network: HostNetwork) -> Iterator[Cluster]:
    """The master, its own Temporal and S3 on the bridge's address; the local agent disabled,
    so every trial runs on a namespace host."""
    port = free_port_block(PORT_BLOCK, network.gateway)
    with shared_servers_cluster(postgres_url, None, "hosts", "--slots", "1", "--s3",
                                "--s3-port", str(port), host=network.gateway,
                                env_extra={**FAST_AGENT_TIMEOUT, **FAST_REJOIN}) as c:
        c.run("agent", "disable", "local-agent")
        yield c


@pytest.fixture(scope="module")
def agents(cluster: Cluster, network: HostNetwork) -> Iterator[dict[str, SecondAgent]]:
    started = {host.name: SecondAgent(cluster, f"agent-{host.name}", host=host)
               for host in network.hosts}
    try:
        for agent in started.values():
            agent.start()
        yield started
    finally:
        for agent in started.values():
            agent.kill()


def config(tmp_path: Path, name: str, *, steps: int, sleep: float, seeds: int) -> Path:
    hparams: dict[str, Any] = {"sleep": sleep, "checkpoint_every": 5, "crash": False}
    searcher: dict[str, Any] = {"name": "single", "metric": "validation_loss",
                                "max_length": {"batches": steps}}
    if seeds > 1:
        hparams["seed"] = {"type": "categorical", "vals": list(range(seeds))}
        searcher.update(name="grid", max_concurrent_trials=seeds)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "hyperparameters": hparams,
        "searcher": searcher, "max_restarts": 2}))
    return path


def test_a_grid_search_runs_across_three_hosts(
    cluster: Cluster, agents: dict[str, SecondAgent], tmp_path: Path
) -> None:
    experiment_id = create(cluster, config(tmp_path, "hosts-grid", steps=10, sleep=0.3,
                                           seeds=3))
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    ran = trials(cluster, experiment_id)
    assert all(t["state"] == "STATE_COMPLETED" and t["totalBatchesProcessed"] == 10 for t in ran)
    assert {t["agentId"] for t in ran} == {a.agent_id for a in agents.values()}
    # Nothing was written where the master keeps shared_fs checkpoints: they are in S3.
    assert not any((cluster.state_dir / "checkpoints").iterdir())


def runs_of_metrics(cluster: Cluster, trial_id: int) -> list[tuple[int, int]]:
    """(step, run) of each stored training metric of the trial, in step order."""

    async def read() -> list[tuple[int, int]]:
        conn = await asyncpg.connect(cluster.env["EPOCHAL_DB_URL"])
        try:
            rows = await conn.fetch(
                "SELECT steps_completed, trial_run_id FROM metrics WHERE trial_id = $1"
                " AND metric_group = 'training' ORDER BY steps_completed", trial_id)
        finally:
            await conn.close()
        return [(int(r["steps_completed"]), int(r["trial_run_id"])) for r in rows]

    return asyncio.run(read())


def trial_processes(agent: SecondAgent, host: Host) -> list[int]:
    """Processes in the host's network other than its agent (and the agent's helpers)."""
    assert agent.proc is not None
    agent_tree = {agent.proc.pid}
    for child in psutil.Process(agent.proc.pid).children(recursive=True):
        try:
            if "train.py" not in " ".join(child.cmdline()):
                agent_tree.add(child.pid)
        except psutil.NoSuchProcess:  # it ended since it was listed (a stopping run's, say)
            continue
    return sorted(host.pids() - agent_tree)


def test_a_host_cut_off_mid_trial_loses_it_to_another_host_and_is_fenced_when_it_returns(
    cluster: Cluster, agents: dict[str, SecondAgent], network: HostNetwork, tmp_path: Path
) -> None:
    # Cut off, the first run waits at its next checkpoint (its report waits for the master), so
    # it is still there when the host returns however short the trial.
    steps = 30
    experiment_id = create(cluster, config(tmp_path, "hosts-cut", steps=steps, sleep=0.4,
                                           seeds=1))
    first = wait_for(lambda: (t := trials(cluster, experiment_id)) and t[0]["agentId"]
                     and t[0]["latestCheckpointUuid"] and t[0], timeout=120,
                     what="a checkpoint of the first run")
    host = next(h for h in network.hosts if f"agent-{h.name}" == first["agentId"])
    agent = agents[host.name]
    assert trial_processes(agent, host), "the trial runs in its host's network"
    [old_token] = [info["session_token"] for path in agent.work_dir.rglob("trial_info.json")
                   if (info := json.loads(path.read_text()))["trial_id"] == first["id"]
                   and info["trial_run_id"] == first["runId"]]
    host.cut()
    try:
        moved = wait_for(lambda: (t := trials(cluster, experiment_id)[0])["runId"] > first["runId"]
                         and t["agentId"] not in (None, first["agentId"]) and t,
                         timeout=150, what="the trial to restart on another host")
    finally:
        host.reconnect()
    assert moved["restarts"] == 1
    # Back on the network, the old run's reports are refused, and its agent learns the run is
    # over and stops it.
    late = httpx.post(f"{cluster.url}/api/v1/trials/{first['id']}/metrics", timeout=30,
                      headers={"Authorization": f"Bearer {old_token}"},
                      json={"group": "training", "metrics": {
                          "trialId": first["id"], "trialRunId": first["runId"],
                          "stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 9.0}}}})
    assert late.status_code == 401, late.text
    assert f"run {first['runId']}" in late.json()["message"]
    wait_for(lambda: not trial_processes(agent, host), timeout=120,
             what="the fenced run on the returned host to stop")
    agent_log = (cluster.state_dir / f"{agent.agent_id}.log").read_text()
    assert f"trial {first['id']} run {first['runId']}: cancelled; stopping" in agent_log
    assert wait_done(cluster, experiment_id, timeout=240) == "STATE_COMPLETED"

    trial = trials(cluster, experiment_id)[0]
    assert trial["runId"] == moved["runId"] and trial["agentId"] == moved["agentId"]
    logs = cluster.run("trial", "logs", str(trial["id"])).stdout
    assert "resumed from checkpoint" in logs
    # Each step is stored once; from the step the new run resumed at, every one is the new run's:
    # nothing the old run sent after it was superseded was accepted.
    stored = runs_of_metrics(cluster, trial["id"])
    assert [step for step, _ in stored] == list(range(1, steps + 1))
    resumed_at = min(step for step, run in stored if run == trial["runId"])
    assert all(run == trial["runId"] for step, run in stored if step >= resumed_at)
    # The returned host's agent is alive again and takes trials.
    wait_for(lambda: agent.alive(), timeout=120, what=f"{agent.agent_id} to be back")


# A user's server on one host, and trials on the others connecting to it until refused.
SERVER_PY = """
import json, socket, time
server = socket.create_server(("0.0.0.0", 0))
print("LISTENING " + json.dumps({"port": server.getsockname()[1]}), flush=True)
time.sleep(600)
"""

PROBE_PY = """
import json, os, socket, time
target, port = os.environ["TARGET"].rsplit(":", 1)
start, outcomes = time.monotonic(), []
while time.monotonic() - start < float(os.environ["FOR_SECONDS"]):
    try:
        socket.create_connection((target, int(port)), timeout=5).close()
        outcomes.append("connected")
    except OSError as err:
        outcomes.append(type(err).__name__)
        if os.environ["UNTIL"] == "refused":
            break
    time.sleep(0.25)
print("PROBED " + json.dumps({"first": outcomes[0], "last": outcomes[-1],
                              "seconds": round(time.monotonic() - start, 2)}), flush=True)
"""


def test_a_port_a_users_run_opens_is_closed_to_other_users_runs_on_every_host(
    cluster: Cluster, agents: dict[str, SecondAgent], network: HostNetwork, tmp_path: Path
) -> None:
    """Each agent tells the master its runs' ports and closes the other agents' to every
    identity but their owner's: another user's trial on another host is refused within a
    heartbeat; the owner's own trial there still connects (a trial's ranks across hosts)."""
    owner = cluster.ordinary_user(tmp_path)  # two ordinary users: the owner and another
    server = script_experiment(cluster, tmp_path, "server", SERVER_PY, env_extra=owner)
    try:
        port = wait_for(lambda: cluster.printed(server, "LISTENING "), 120,
                        "the server's port")["port"]
        agent_id = trials(cluster, server)[0]["agentId"]
        [host] = [h for h in network.hosts if f"agent-{h.name}" == agent_id]
        target = f"{host.address}:{port}"
        other = cluster.ordinary_user(tmp_path)
        theirs = script_experiment(cluster, tmp_path, "theirs", PROBE_PY, {
            "TARGET": target, "FOR_SECONDS": "60", "UNTIL": "refused"}, env_extra=other)
        assert wait_done(cluster, theirs) == "STATE_COMPLETED"
        found = cluster.printed(theirs, "PROBED ")
        assert trials(cluster, theirs)[0]["agentId"] != agent_id
        assert found["last"] == "ConnectionRefusedError", found
        print(f"another user's trial on another host refused after {found['seconds']} s")
        owners = script_experiment(cluster, tmp_path, "owners", PROBE_PY, {
            "TARGET": target, "FOR_SECONDS": "2", "UNTIL": "end"}, env_extra=owner)
        assert wait_done(cluster, owners) == "STATE_COMPLETED"
        found = cluster.printed(owners, "PROBED ")
        assert trials(cluster, owners)[0]["agentId"] != agent_id
        assert found["first"] == found["last"] == "connected", found
    finally:
        cluster.run("experiment", "kill", str(server), check=False, env_extra=owner)
    wait_done(cluster, server)

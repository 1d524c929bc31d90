"""Agents provisioned on demand: a pool whose provider starts agent processes (`type:
process`) gets as many agents as its queue needs, up to `max_instances`, runs every trial on
them, and retires them once idle; an agent that never registers (here: frozen with SIGSTOP as
soon as it starts) is terminated after `max_agent_starting_period` and replaced."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from providers.process import pid_files
from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.e2e.test_faults import create, trials, wait_done
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

POOL = "auto"
MASTER_CONFIG = {"resource_pools": [
    {"pool_name": "default", "description": "the local agent's"},
    {"pool_name": POOL, "provider": {
        "type": "process", "max_instances": 3, "max_idle_agent_period": "6s",
        "max_agent_starting_period": "12s", "interval": "1s",
        # Determined's settings Epochal has no use for are named in the log, not refused.
        "instance_type": "n1-standard-4"}},
]}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = tmp_path_factory.mktemp("master") / "master.yaml"
    config.write_text(yaml.safe_dump(MASTER_CONFIG))
    with shared_servers_cluster(postgres_url, temporal_address, "provisioning", "--slots", "1",
                                env_extra={"EPOCHAL_MASTER_CONFIG": str(config)}) as c:
        yield c


def agent_processes(cluster: Cluster) -> list[psutil.Process]:
    """The provisioned agents' processes: `python -m agent_worker ... --pool auto`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "agent_worker" in cmd and POOL in cmd and str(cluster.state_dir) in " ".join(cmd):
            found.append(proc)
    return found


def pool_agents(cluster: Cluster) -> list[dict[str, Any]]:
    return [a for a in cluster.get("/agents")["agents"] if a["resourcePool"] == POOL]


class FirstAgentFreezer(threading.Thread):
    """SIGSTOPs the first provisioned agent process the moment it appears (before it can
    register), as a machine that hangs in its boot would."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.frozen: psutil.Process | None = None
        self.agent_id = ""
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while self.frozen is None and time.monotonic() < deadline and not self.done.is_set():
            for proc in agent_processes(self.cluster):
                os.kill(proc.pid, signal.SIGSTOP)
                cmd = proc.cmdline()
                self.frozen, self.agent_id = proc, cmd[cmd.index("--agent-id") + 1]
                break
            time.sleep(0.02)


def test_a_queue_of_six_trials_gets_three_agents_which_retire_when_idle(
    cluster: Cluster, tmp_path: Path
) -> None:
    freezer = FirstAgentFreezer(cluster)
    freezer.start()
    config = tmp_path / "auto.yaml"
    config.write_text(yaml.safe_dump({
        "name": "provisioned", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.5, "checkpoint_every": 3, "crash": False,
                            "seed": {"type": "categorical", "vals": list(range(6))}},
        "searcher": {"name": "grid", "metric": "validation_loss",
                     "max_length": {"batches": 16}, "max_concurrent_trials": 6},
        "resources": {"resource_pool": POOL}, "max_restarts": 0}))
    experiment_id = create(cluster, config)

    instances: list[int] = []  # how many the provider ran at each look
    seen: set[str] = set()

    def done_and_watched() -> bool:
        seen.update(a["id"] for a in pool_agents(cluster) if a["alive"])
        instances.append(len(pid_files(cluster.state_dir)))
        return cluster.json("experiment", "describe", str(experiment_id))["experiment"][
            "state"] in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")

    wait_for(done_and_watched, timeout=240, what="the experiment to end")
    freezer.done.set()
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    ran = trials(cluster, experiment_id)
    assert len(ran) == 6 and all(t["state"] == "STATE_COMPLETED" for t in ran)
    assert {t["agentId"] for t in ran} <= seen
    # The queue asked for 6 slots: 3 instances (max_instances) at once, never more; with the
    # frozen one replaced, 3 agents registered.
    assert max(instances) == 3
    assert len(seen) == 3

    # The frozen agent never registered; it was terminated and replaced.
    assert freezer.frozen is not None
    assert freezer.agent_id not in seen
    assert not freezer.frozen.is_running() or freezer.frozen.status() == psutil.STATUS_ZOMBIE
    master_log = (cluster.state_dir / "logs" / "master.log").read_text()
    assert (f"terminating {freezer.agent_id} (its agent did not register within 12 s)"
            in master_log)
    assert f"resource_pools.{POOL}.provider.instance_type is not used by Epochal" in master_log

    # Idle, they are drained and retired: no agent of the pool is left, alive or running.
    wait_for(lambda: not agent_processes(cluster)
             and not any(a["alive"] for a in pool_agents(cluster)),
             timeout=90, what="the idle agents to be retired")
    assert "idle for 6 s" in (cluster.state_dir / "logs" / "master.log").read_text()

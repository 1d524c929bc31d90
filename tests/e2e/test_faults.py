"""Faults with real processes: an agent killed mid-trial, the master killed mid-experiment, a
trial that always crashes, and priorities. A local cluster (master + agent `local-agent`, one
slot) runs on the session's PostgreSQL and Temporal in its own namespace, plus a second agent
started here, so tests can kill either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from common.processes import read_pid
from tests.e2e.cluster import (
    FAST_AGENT_TIMEOUT,
    SLOW_MODEL,
    Cluster,
    SecondAgent,
    created_id,
    shared_servers_cluster,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


# The agents give up a cancelled run's last lines after 5 s instead of 30 (--log-close-timeout),
# so a master away longer than that shows that a run's end waits for its output however long.
LOG_CLOSE_TIMEOUT = {"EPOCHAL_LOG_CLOSE_TIMEOUT_SECONDS": "5"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "faults", "--slots", "1",
                                env_extra={**FAST_AGENT_TIMEOUT, **LOG_CLOSE_TIMEOUT}) as c:
        yield c


@pytest.fixture
def second_agent(cluster: Cluster) -> Iterator[SecondAgent]:
    agent = SecondAgent(cluster)
    agent.start()
    yield agent
    agent.kill()


def slow_config(tmp_path: Path, name: str, *, steps: int = 40, sleep: float = 0.25,
                crash: bool = False, priority: int | None = None, trials: int = 1,
                max_restarts: int = 3) -> Path:
    hparams: dict[str, Any] = {"sleep": sleep, "checkpoint_every": 5, "crash": crash}
    searcher: dict[str, Any] = {"name": "single", "metric": "validation_loss",
                                "max_length": {"batches": steps}}
    if trials > 1:  # one trial crashes (if `crash`), the others do not
        hparams["crash"] = {"type": "categorical",
                            "vals": [crash] + [False] * (trials - 1)}
        searcher = {"name": "grid", "metric": "validation_loss",
                    "max_length": {"batches": steps}, "max_concurrent_trials": 8}
    config: dict[str, Any] = {
        "name": name, "entrypoint": "python3 train.py", "hyperparameters": hparams,
        "searcher": searcher, "max_restarts": max_restarts,
    }
    if priority is not None:
        config["resources"] = {"priority": priority}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def create(cluster: Cluster, config: Path) -> int:
    return created_id(cluster.run("experiment", "create", str(config), str(SLOW_MODEL)).stdout)


def trials(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    return cluster.trials(experiment_id)


def state(cluster: Cluster, experiment_id: int) -> str:
    return str(cluster.experiment(experiment_id)["state"])


def wait_done(cluster: Cluster, experiment_id: int, timeout: float = 180) -> str:
    terminal = {"STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"}
    return str(wait_for(lambda: (s := state(cluster, experiment_id)) in terminal and s,
                        timeout=timeout, what=f"experiment {experiment_id} to end"))


def training_metrics(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    answer = httpx.get(f"{cluster.url}/api/v1/trials/{trial_id}/metrics",
                       params={"group": "training"}, headers=cluster.headers, timeout=30).json()
    return list(answer["metrics"])


def test_a_trial_resumes_on_another_agent_when_its_agent_is_killed(
    cluster: Cluster, second_agent: SecondAgent, tmp_path: Path
) -> None:
    cluster.run("agent", "disable", "local-agent")  # the first run goes to agent-2
    try:
        experiment_id = create(cluster, slow_config(tmp_path, "agent-kill"))
        wait_for(lambda: (t := trials(cluster, experiment_id)) and t[0]["latestCheckpointUuid"]
                 and t[0]["agentId"] == "agent-2", timeout=90, what="a checkpoint on agent-2")
        second_agent.kill()  # at once: the agent timeout runs while local-agent is enabled
    finally:
        cluster.run("agent", "enable", "local-agent")
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    trial = trials(cluster, experiment_id)[0]
    assert trial["restarts"] == 1 and trial["runId"] == 2
    assert trial["agentId"] == "local-agent"
    logs = cluster.run("trial", "logs", str(trial["id"])).stdout
    # After the cluster's agent timeout (FAST_AGENT_TIMEOUT), not the default 30 s.
    assert "run 1 failed: agent lost or unresponsive (no heartbeat for 12 s)" in logs, logs
    assert "restarting from checkpoint" in logs
    assert "resumed from checkpoint" in logs
    assert [m["stepsCompleted"] for m in training_metrics(cluster, trial["id"])] == list(
        range(1, 41))


def restart_during_training(
    cluster: Cluster, tmp_path: Path, name: str, stop: Callable[[], None]
) -> None:
    """`stop` a part mid-training, bring it back with `cluster up`: the experiment completes
    with each of its 40 training metrics stored exactly once."""
    experiment_id = create(cluster, slow_config(tmp_path, name, steps=40, sleep=0.2))
    wait_for(
        lambda: (t := trials(cluster, experiment_id)) and t[0]["totalBatchesProcessed"] > 5,
        timeout=90,
        what="training to start",
    )
    stop()
    time.sleep(3)  # training goes on meanwhile; its reports wait and retry
    cluster.run("cluster", "up")  # starts whatever is not running
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    trial = trials(cluster, experiment_id)[0]
    steps = [m["stepsCompleted"] for m in training_metrics(cluster, trial["id"])]
    assert steps == list(range(1, 41))


def test_the_master_killed_mid_experiment_loses_and_doubles_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    def kill_master() -> None:
        pid = read_pid(cluster.state_dir / "run" / "master.pid")
        assert pid is not None
        psutil.Process(pid).kill()  # kill -9: API and workflow worker at once
        psutil.Process(pid).wait(10)

    restart_during_training(cluster, tmp_path, "master-kill", kill_master)


def test_a_trial_that_always_crashes_errors_while_its_siblings_complete(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = slow_config(tmp_path, "crash", steps=5, sleep=0.01, crash=True, trials=2,
                         max_restarts=1)
    experiment_id = create(cluster, config)
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    every = trials(cluster, experiment_id)
    crashed = [t for t in every if t["hparams"]["crash"]]
    assert len(every) == 2 and len(crashed) == 1
    assert {t["state"] for t in every if not t["hparams"]["crash"]} == {"STATE_COMPLETED"}
    assert crashed[0]["state"] == "STATE_ERROR"
    assert crashed[0]["restarts"] == 2  # the first run, then max_restarts (1) more, then ERROR
    logs = cluster.run("trial", "logs", str(crashed[0]["id"])).stdout
    assert "restarting from checkpoint" in logs and "max_restarts (1) spent" in logs


def test_a_higher_priority_experiment_submitted_later_runs_first(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Long enough to outlast two submissions on a busy machine (10 s did not, once); it is
    # killed once the queue is checked, so its length costs nothing.
    blocker = create(cluster, slow_config(tmp_path, "blocker", steps=1000, sleep=0.25))
    wait_for(lambda: trials(cluster, blocker) and trials(cluster, blocker)[0]["state"]
             == "STATE_RUNNING", timeout=60, what="the blocker to run")
    low = create(cluster, slow_config(tmp_path, "low", steps=2, sleep=0.01, priority=60))
    wait_for(lambda: len(cluster.json("job", "list")["jobs"]) >= 2, timeout=30,
             what="the low-priority job to queue")
    high = create(cluster, slow_config(tmp_path, "high", steps=2, sleep=0.01, priority=5))
    wait_for(lambda: len(cluster.json("job", "list")["jobs"]) >= 3, timeout=30,
             what="the high-priority job to queue")
    jobs = cluster.json("job", "list")["jobs"]
    assert [j["entityId"] for j in jobs] == [str(blocker), str(high), str(low)]
    assert [j["summary"]["state"] for j in jobs] == ["STATE_SCHEDULED"] + ["STATE_QUEUED"] * 2
    cluster.run("experiment", "kill", str(blocker))  # frees the slot; no need to wait for it
    assert wait_done(cluster, blocker) == "STATE_CANCELED"
    for experiment_id in (low, high):
        assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    # One slot: `high` ran (and ended) before `low`, though it was submitted later.
    assert trials(cluster, high)[0]["endTime"] < trials(cluster, low)[0]["endTime"]


AWAY_SCRIPT = '''
import time
import harness.core

with harness.core.init() as core:
    for step in range(1, 21):
        core.train.report_training_metrics(step, {"loss": 1.0 / step})
    core.train.report_validation_metrics(20, {"loss": 0.05})  # waits until they are stored
    print("metrics delivered", flush=True)
    time.sleep(4)  # the master is stopped meanwhile
    for i in range(200):
        print(f"closing line {i}", flush=True)
'''


def test_a_master_away_when_a_run_ends_loses_no_log_line(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The master is stopped while a trial prints its last lines and exits, and stays away
    longer than the agent's log close timeout (what it once waited for a run's output) and its
    agent timeout (the run waiting for its output heartbeats meanwhile): when it is back, every
    line is there and the run ended without a restart; the run was not over before its output
    was."""
    model = tmp_path / "away"
    model.mkdir()
    (model / "train.py").write_text(AWAY_SCRIPT)
    config = tmp_path / "away.yaml"
    config.write_text(yaml.safe_dump({
        "name": "master-away", "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss"}}))
    experiment_id = created_id(cluster.run("experiment", "create", str(config),
                                           str(model)).stdout)

    def delivered() -> bool:
        found = trials(cluster, experiment_id)
        return bool(found) and "metrics delivered" in cluster.run(
            "trial", "logs", str(found[0]["id"])).stdout

    wait_for(delivered, timeout=90, what="the trial's metrics to be stored")
    pid = read_pid(cluster.state_dir / "run" / "master.pid")
    assert pid is not None
    psutil.Process(pid).kill()
    psutil.Process(pid).wait(10)
    # Away while the run ends (its last 4 s), then for longer than either timeout: the agent
    # must outlast the master's absence.
    timeouts = (*FAST_AGENT_TIMEOUT.values(), *LOG_CLOSE_TIMEOUT.values())
    time.sleep(4 + max(float(seconds) for seconds in timeouts) + 4)
    cluster.run("cluster", "up")
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    trial = trials(cluster, experiment_id)[0]
    assert trial["restarts"] == 0
    logs = cluster.run("trial", "logs", str(trial["id"])).stdout
    closing = [line for line in logs.splitlines() if "closing line" in line]
    assert len(closing) == 200, logs[-2000:]
    assert [m["stepsCompleted"] for m in training_metrics(cluster, trial["id"])] == list(
        range(1, 21))

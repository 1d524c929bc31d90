"""Preemption by priority and backfilling with real processes (issue 38).

One local cluster for the module (master + agent `local-agent` with 2 slots, on the session's
PostgreSQL and Temporal), its pool `default` set by EPOCHAL_MASTER_CONFIG the way a Determined
master.yaml says it: `scheduler: {type: priority, preemption: true}` and
`task_container_defaults: {preemption_timeout: 20}`. Its trials run
tests/e2e/preemptible_model/train.py (Epochal's harness): a metric per step, a checkpoint every
few steps and, told so by `core.preempt.should_preempt()`, a checkpoint and an exit.

- A priority-1 experiment takes a slot from one of two priority-42 trials that fill the cluster
  within that trial's time to its next checkpoint (+5 s); both finish, the preempted one from its
  checkpoint, every step trained and stored once, no restart counted.
- A trial that ignores preemption is killed after the pool's 20 s grace and resumes from its
  last checkpoint.
- With a second agent: a 2-slot request that fits nowhere reserves an agent; 1-slot requests
  behind it run on the other agent (backfilling) but never on the reserved agent's free slot,
  and the 2-slot trial starts there once that agent's slots free.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.cluster import (
    FAST_AGENT_TIMEOUT,
    REPO,
    Cluster,
    SecondAgent,
    created_id,
    shared_servers_cluster,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

MODEL = REPO / "tests" / "e2e" / "preemptible_model"
GRACE = 20  # the pool's preemption_timeout, seconds
TERMINAL = {"STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    master_config = tmp_path_factory.mktemp("preemption-master") / "master.yaml"
    master_config.write_text(yaml.safe_dump({
        "resource_pools": [{"pool_name": "default",
                            "scheduler": {"type": "priority", "preemption": True}}],
        "task_container_defaults": {"preemption_timeout": GRACE},
    }))
    env = {**FAST_AGENT_TIMEOUT, "EPOCHAL_MASTER_CONFIG": str(master_config)}
    with shared_servers_cluster(postgres_url, temporal_address, "preemption", "--slots", "2",
                                env_extra=env) as c:
        [pool] = c.get("/resource-pools")["resourcePools"]
        assert (pool["name"], pool["preemptible"], pool["slotsAvailable"]) == (
            "default", True, 2), pool
        yield c


def create(cluster: Cluster, tmp_path: Path, name: str, *, steps: int, sleep: float,
           checkpoint_every: int = 5, priority: int = 42, slots: int = 1,
           honors_preemption: bool = True) -> int:
    """A one-trial experiment of the preemptible model; its id."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss"},
        "hyperparameters": {"steps": steps, "sleep": sleep, "checkpoint_every": checkpoint_every,
                            "honors_preemption": honors_preemption},
        "resources": {"priority": priority, "slots_per_trial": slots},
    }))
    return created_id(cluster.run("experiment", "create", str(config), str(MODEL)).stdout)


def trial(cluster: Cluster, experiment_id: int) -> dict[str, Any] | None:
    """The experiment's one trial, None before it has one."""
    found = cluster.trials(experiment_id)
    assert len(found) <= 1, found
    return found[0] if found else None


def wait_trial(cluster: Cluster, experiment_id: int, state: str, timeout: float = 60, *,
               interval: float = 0.3) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (t := trial(cluster, experiment_id)) is not None and t["state"] == state and t,
        timeout, f"experiment {experiment_id}'s trial to be {state}", interval=interval))


def wait_done(cluster: Cluster, experiment_id: int, timeout: float = 120) -> str:
    return str(wait_for(
        lambda: (s := cluster.experiment(experiment_id)["state"]) in TERMINAL and s,
        timeout, f"experiment {experiment_id} to end"))


def kill(cluster: Cluster, experiment_id: int, *, check: bool = True) -> None:
    """Kill the experiment through the API (a CLI process costs a third of a core)."""
    answer = httpx.post(f"{cluster.url}/api/v1/experiments/{experiment_id}/kill",
                        headers=cluster.headers, timeout=30)
    if check:
        answer.raise_for_status()


def logs(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return cluster.trial_logs(trial_id)


def lines(cluster: Cluster, trial_id: int) -> list[str]:
    return [line["log"].rstrip("\n") for line in logs(cluster, trial_id)]


def when(cluster: Cluster, trial_id: int, text: str) -> datetime:
    """When the trial's first log line holding `text` was written."""
    found = [line for line in logs(cluster, trial_id) if text in line["log"]]
    assert found, f"no log line of trial {trial_id} holds {text!r}"
    return datetime.fromisoformat(found[0]["timestamp"])


def training_steps(cluster: Cluster, trial_id: int) -> list[int]:
    metrics = cluster.get(f"/trials/{trial_id}/metrics", group="training")["metrics"]
    return [m["stepsCompleted"] for m in metrics]


def trained_steps(text: list[str]) -> Counter[int]:
    """How often each step was trained, by the runs' own "trained step N" lines."""
    return Counter(int(m.group(1)) for line in text
                   if (m := re.search(r"trained step (\d+)$", line)))


def checkpoints_printed(text: list[str]) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for line in text
            if (m := re.search(r"checkpoint ([0-9a-f-]{36}) at step (\d+)$", line))]


def test_a_higher_priority_experiment_preempts_one_trial_which_resumes_from_its_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    steps, sleep, every = 30, 0.4, 5
    low = [create(cluster, tmp_path, f"p42-{n}", steps=steps, sleep=sleep,
                  checkpoint_every=every) for n in ("first", "second")]
    for experiment_id in low:
        wait_trial(cluster, experiment_id, "STATE_RUNNING")
    # The cluster is full, both mid-training.
    wait_for(lambda: all((t := trial(cluster, e)) and t["totalBatchesProcessed"] >= 2
                         for e in low), 60, "both priority-42 trials to train")

    urgent = create(cluster, tmp_path, "p1", steps=5, sleep=0.1, priority=1)
    submitted = datetime.fromisoformat(cluster.experiment(urgent)["startTime"])
    wait_trial(cluster, urgent, "STATE_RUNNING", 60, interval=0.1)
    running = datetime.now(submitted.tzinfo)
    # The preempted trial stops at its next step's check, with a checkpoint: at the latest within
    # its time to its next periodic checkpoint.
    took = (running - submitted).total_seconds()
    assert took <= every * sleep + 5, f"the priority-1 trial ran {took:.1f} s after submission"
    still = [t for e in low if (t := trial(cluster, e)) and t["state"] == "STATE_RUNNING"]
    assert len(still) == 1, "the other priority-42 trial trains on beside the priority-1 one"

    assert wait_done(cluster, urgent) == "STATE_COMPLETED"
    for experiment_id in low:
        assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    trials = [trial(cluster, e) for e in low]
    assert all(t is not None for t in trials)
    preempted = [t for t in trials if t and any("[epochal] preempted" in line
                                                for line in lines(cluster, t["id"]))]
    assert len(preempted) == 1, "exactly one priority-42 trial was preempted"
    [victim] = preempted
    [other] = [t for t in trials if t and t["id"] != victim["id"]]

    text = lines(cluster, victim["id"])
    said = next(line for line in text if "[epochal] preempted" in line)
    assert f"experiment {urgent} (priority 1; this run's is 42)" in said, said
    assert f"within {GRACE} s" in said, said
    stopped = next(int(m.group(1)) for line in text
                   if (m := re.search(r"preempted at step (\d+): checkpointed", line)))
    assert 0 < stopped < steps
    uuid = next(u for u, at in checkpoints_printed(text) if at == stopped)
    assert any(f"run 1 gave its slots back; queued again, to resume from checkpoint {uuid}"
               in line for line in text), text
    assert any(f"resumed from checkpoint {uuid} at step {stopped}" in line for line in text)
    # Run 1 trained steps 1..stopped, run 2 the rest: every step once.
    assert trained_steps(text) == Counter(range(1, steps + 1))
    assert training_steps(cluster, victim["id"]) == list(range(1, steps + 1))
    assert (victim["state"], victim["runId"], victim["restarts"]) == ("STATE_COMPLETED", 2, 0)
    # The priority-1 trial ran while the other one still trained.
    assert datetime.fromisoformat(other["endTime"]) > running
    assert not any("[epochal] preempted" in line for line in lines(cluster, other["id"]))
    assert training_steps(cluster, other["id"]) == list(range(1, steps + 1))
    assert (other["runId"], other["restarts"]) == (1, 0)


def test_a_trial_that_ignores_its_preemption_is_killed_after_the_grace_and_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    steps = 70  # 28 s of training: it outlasts the grace
    deaf = create(cluster, tmp_path, "ignores-preemption", steps=steps, sleep=0.4,
                  honors_preemption=False)
    wait_for(lambda: (t := trial(cluster, deaf)) and t["state"] == "STATE_RUNNING"
             and t["latestCheckpointUuid"], 60, "the trial's first checkpoint")
    # Two slots: the other is free, so the one the deaf trial holds must be taken.
    urgent = create(cluster, tmp_path, "p1-two-slots", steps=3, sleep=0.1, priority=1, slots=2)

    assert wait_done(cluster, urgent, 90) == "STATE_COMPLETED"
    assert wait_done(cluster, deaf, 90) == "STATE_COMPLETED"
    found = trial(cluster, deaf)
    assert found is not None
    assert (found["runId"], found["restarts"]) == (2, 0)
    text = lines(cluster, found["id"])
    killed = f"[epochal] run 1 did not stop within {GRACE} s of its preemption: killed"
    assert any(killed in line for line in text), text
    waited = (when(cluster, found["id"], killed)
              - when(cluster, found["id"], "[epochal] preempted")).total_seconds()
    assert GRACE - 0.5 <= waited <= GRACE + 10, waited
    assert not any("preempted at step" in line for line in text)  # it never asked
    # Run 2 resumed from the last checkpoint run 1 made before it was killed.
    requeued = next(i for i, line in enumerate(text) if "gave its slots back" in line)
    uuid, at = checkpoints_printed(text[:requeued])[-1]
    assert f"queued again, to resume from checkpoint {uuid}" in text[requeued]
    assert any(f"resumed from checkpoint {uuid} at step {at}" in line
               for line in text[requeued:]), text[requeued:]
    trained = trained_steps(text)
    assert set(trained) == set(range(1, steps + 1))
    assert all(n == 1 for step, n in trained.items() if step <= at)  # before the checkpoint
    assert training_steps(cluster, found["id"]) == list(range(1, steps + 1))


def test_a_waiting_two_slot_trial_reserves_an_agent_while_one_slot_trials_backfill(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two agents of 2 slots, each holding one 1-slot trial: a 2-slot trial (same priority, so
    nothing is preempted) waits and reserves one of them; a 1-slot trial submitted after it
    runs on the other agent's free slot, the next 1-slot one waits although the reserved agent
    has a free slot, and the 2-slot trial starts on the reserved agent once its trial ends."""
    def long(name: str) -> int:  # trains until killed
        return create(cluster, tmp_path, name, steps=10_000, sleep=0.2, checkpoint_every=10_000)

    agent = SecondAgent(cluster, "agent-2", slots=2)
    started: list[int] = []
    try:
        on_local = long("bf-local")
        started.append(on_local)
        assert wait_trial(cluster, on_local, "STATE_RUNNING")["agentId"] == "local-agent"
        agent.start()
        cluster.run("agent", "disable", "local-agent")  # the next trial goes to agent-2
        try:
            on_second = long("bf-second")
            started.append(on_second)
            assert wait_trial(cluster, on_second, "STATE_RUNNING")["agentId"] == "agent-2"
        finally:
            cluster.run("agent", "enable", "local-agent")
        wait_for(lambda: all(a["enabled"] for a in cluster.get("/agents")["agents"]), 30,
                 "local-agent to take work again")

        big = create(cluster, tmp_path, "bf-big", steps=3, sleep=0.1, slots=2)
        started.append(big)
        wait_for(lambda: any(j["entityId"] == str(big) and j["summary"]["state"]
                             == "STATE_QUEUED" for j in cluster.get("/job-queues")["jobs"]),
                 60, "the 2-slot trial to wait")
        small = long("bf-small")
        started.append(small)
        backfilled = wait_trial(cluster, small, "STATE_RUNNING")
        assert trial(cluster, big)["state"] == "STATE_QUEUED"  # type: ignore[index]
        holders = {e: trial(cluster, e)["agentId"]  # type: ignore[index]
                   for e in (on_local, on_second)}
        [reserved] = {"local-agent", "agent-2"} - {backfilled["agentId"]}
        [blocking] = [e for e, agent_id in holders.items() if agent_id == reserved]

        extra = create(cluster, tmp_path, "bf-extra", steps=3, sleep=0.1)
        started.append(extra)
        wait_for(lambda: any(j["entityId"] == str(extra) and j["summary"]["state"]
                             == "STATE_QUEUED" for j in cluster.get("/job-queues")["jobs"]),
                 60, "the second 1-slot trial to wait")
        agents = {a["id"]: a for a in cluster.get("/agents")["agents"]}
        busy = [s for s in agents[reserved]["slots"].values() if s.get("container")]
        assert len(busy) == 1, agents[reserved]  # a free slot, kept for the 2-slot trial
        assert trial(cluster, extra)["state"] == "STATE_QUEUED"  # type: ignore[index]

        kill(cluster, blocking)
        ran = wait_trial(cluster, big, "STATE_RUNNING", 60)
        assert ran["agentId"] == reserved
        assert trial(cluster, small)["state"] == "STATE_RUNNING"  # type: ignore[index]
        assert wait_done(cluster, big) == "STATE_COMPLETED"
        assert wait_done(cluster, extra) == "STATE_COMPLETED"
        assert trial(cluster, extra)["agentId"] == reserved  # type: ignore[index]
    finally:
        for experiment_id in started:
            kill(cluster, experiment_id, check=False)
        for experiment_id in started:
            wait_done(cluster, experiment_id, 60)
        agent.kill()
        wait_for(lambda: not agent.alive(), 30, "agent-2 to be lost")
